package loupeevents

// Runs the shared test vectors through the generated Go stub: every record
// decodes and re-encodes through its typed encoder to the same bytes, and
// scalar fields decode to the vector's values.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

type vector struct {
	Event  string
	ID     uint16
	TS     uint64
	Fields []json.Number
	Hex    string
}

func TestVectors(t *testing.T) {
	raw, err := os.ReadFile("../../vectors/loupe.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range vs {
		want, _ := hex.DecodeString(v["hex"].(string))
		id, ts, fields, enc, err := Decode(want)
		if err != nil {
			t.Fatalf("%s: %v", v["event"], err)
		}
		if EventName(id) != v["event"] || fmt.Sprint(ts) != v["ts"].(json.Number).String() {
			t.Fatalf("%s: header decoded as %s ts %d", v["event"], EventName(id), ts)
		}
		for i, f := range v["fields"].([]any) {
			if n, ok := f.(json.Number); ok && fmt.Sprint(fields[i]) != n.String() {
				if fv, err := n.Float64(); err != nil || fmt.Sprint(fields[i]) != fmt.Sprint(fv) {
					t.Fatalf("%s field %d: decoded %v, want %v", v["event"], i, fields[i], n)
				}
			}
		}
		if got := enc(); !bytes.Equal(got, want) {
			t.Fatalf("%s: re-encoded\n%x\nwant\n%x", v["event"], got, want)
		}
	}
}
