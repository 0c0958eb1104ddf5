// tracedemo logs 3 iterations of phase 7, each with 100 progress events,
// through the generated Go stub; run it under `loupe trace record`.
// `tracedemo bench N` logs N progress events and prints ns/event instead.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"loupe.dev/sdk/go/loupeevents"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "bench" {
		n, _ := strconv.Atoi(os.Args[2])
		d := []int32{1, -1}
		t0 := time.Now()
		for i := 0; i < n; i++ {
			loupeevents.LoupeAppProgress(uint64(i), 1.0, "bench", d)
		}
		fmt.Printf("%.2f ns/event\n", float64(time.Since(t0).Nanoseconds())/float64(n))
		return
	}
	if !loupeevents.Enabled() {
		fmt.Fprintln(os.Stderr, "tracedemo: $LOUPE_TRACE_SHM is not set; events go nowhere")
	}
	for it := uint64(0); it < 3; it++ {
		loupeevents.LoupePhaseBegin(7, it)
		for k := uint64(0); k < 100; k++ {
			loupeevents.LoupeAppProgress(k, 0.5, "go", []int32{int32(k), -1})
		}
		loupeevents.LoupePhaseEnd(7, it)
	}
}
