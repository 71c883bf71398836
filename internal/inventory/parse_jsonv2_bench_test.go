//go:build goexperiment.jsonv2

package inventory

import (
	jsonv2 "encoding/json/v2"
	"testing"
)

// BenchmarkParseSectionsJSONv2 is encoding/json/v2 (GOEXPERIMENT=jsonv2 in
// Go 1.26) on the same payloads: it refuses duplicate names by default and
// unknown members when asked, and names a JSON pointer in its errors; it
// refuses 3.0 for an integer, which the report's contract accepts.
func BenchmarkParseSectionsJSONv2(b *testing.B) {
	payloads := benchPayloads(b)
	for _, name := range []string{"h100", "mig"} {
		raw := payloads[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var s Sections
				if err := jsonv2.Unmarshal(raw, &s, jsonv2.RejectUnknownMembers(true)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
