// tracedemo logs 3 iterations of phase 7, each with 100 progress events,
// through the generated Go stub; run it under `loupe trace record`.
package main

import (
	"fmt"
	"os"

	"loupe.dev/sdk/go/loupeevents"
)

func main() {
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
