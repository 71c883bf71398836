package inventory

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

// FuzzDecodeSections feeds untrusted reports to Decode. It must never panic;
// every rejection is INVALID_INPUT with a path under `sections`; every
// acceptance is valid JSON whose canonical bytes decode again to the same
// canonical bytes and hash, which Parse reads back to the same Sections, and
// which diffs against itself to nothing.
func FuzzDecodeSections(f *testing.F) {
	if raw, err := os.ReadFile("testdata/h100-node.json"); err == nil {
		f.Add(raw)
	}
	for _, s := range []string{
		`{}`, `{"gpus":[{"uuid":"GPU-1","index":0,"migMode":"enabled","migDevices":[{"profile":"1g.10gb","uuid":"MIG-1"}]}]}`,
		`{"os":{"name":"a","name":"b"}}`, `{"memory":{"totalBytes":1e400}}`, `{"cpu":{"cores":1.0e1}}`,
		`{"nics":[{"mac":"aa:bb:cc:dd:ee:ff"},{"mac":"AA:BB:CC:DD:EE:FF"}]}`, `{"drivers":{"nvidia":"\ud83d\ude80"}}`,
		`{"gpus":[[[[[[[[[[[[]]]]]]]]]]]]}`, `{"disks":[{"wwn":"a","slot":"s"},{"wwn":"b","slot":"s"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, canonical, hash, err := Decode(raw)
		if err != nil {
			e, ok := errs.As(err)
			if !ok || e.Code != errs.InvalidInput {
				t.Fatalf("rejection is not INVALID_INPUT: %v", err)
			}
			if p, _ := e.Details["path"].(string); !strings.HasPrefix(p, "sections") {
				t.Fatalf("path %q", e.Details["path"])
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		if hash != Hash(canonical) {
			t.Fatal("hash is not the SHA-256 of the canonical bytes")
		}
		s2, canonical2, hash2, err := Decode(canonical)
		if err != nil {
			t.Fatalf("canonical form %q rejected: %v", canonical, err)
		}
		if hash2 != hash || !bytes.Equal(canonical, canonical2) {
			t.Fatalf("canonical form is not stable: %q -> %q", canonical, canonical2)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("canonical form decodes differently")
		}
		parsed, err := Parse(canonical)
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if !reflect.DeepEqual(parsed, s) {
			t.Fatalf("Parse and Decode disagree on %q:\n%+v\n%+v", canonical, parsed, s)
		}
		// The typed view is itself a valid report.
		typed, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := Decode(typed); err != nil {
			t.Fatalf("typed view %s rejected: %v", typed, err)
		}
		if d := Diff(s, parsed); len(d) != 0 {
			t.Fatalf("a report differs from itself: %v", d)
		}
		if d := Diff(nil, s); d == nil || len(d) != 0 {
			t.Fatalf("Diff(nil, s) = %v", d)
		}
		Diff(s, nil)
		Diff(&Sections{}, s)
	})
}
