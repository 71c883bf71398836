package page

import (
	"encoding/base64"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

// A cursor has one spelling: base64's decoder skips CR and LF, so a cursor
// with them inside read as the cursor without them.
func TestDecodeTakesOnlyCanonicalCursors(t *testing.T) {
	c := Encode("acme", 42)
	var s string
	var n int
	if ok, err := Decode(c, &s, &n); !ok || err != nil || s != "acme" || n != 42 {
		t.Fatalf("%q: %v %v %q %d", c, ok, err, s, n)
	}
	for _, bad := range []string{c[:3] + "\n" + c[3:], c + "\r\n"} {
		if _, err := Decode(bad, &s, &n); errs.CodeOf(err) != errs.InvalidInput {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// A cursor is Encode's of what it holds: a part of null read as the first
// page again, and a key holding a NUL reached the database and failed
// there (a probe: "the request breaks a constraint of the data").
func TestDecodeTakesOnlyEncodesCursors(t *testing.T) {
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	var s string
	var n int
	for _, bad := range []string{raw(`[null,1]`), raw(`["node_\u0000",1]`), raw(`["a", 1e2]`), raw(`[ "a",1]`), raw(`["a",1.0]`), raw(`["\u0061",1]`)} {
		if ok, err := Decode(bad, &s, &n); ok || errs.CodeOf(err) != errs.InvalidInput {
			t.Errorf("%q: %v %v", bad, ok, err)
		}
	}
	if ok, err := Decode(raw(`["a",1]`), &s, &n); !ok || err != nil {
		t.Fatal(ok, err)
	}
}

// What Decode takes re-encodes to itself.
func FuzzDecode(f *testing.F) {
	f.Add(Encode("acme", 42))
	f.Add(Encode("node_x", -1))
	f.Add("W251bGwsMV0")
	f.Fuzz(func(t *testing.T, c string) {
		var s string
		var n int
		if ok, err := Decode(c, &s, &n); ok && err == nil && Encode(s, n) != c {
			t.Fatalf("%q decoded as %q %d", c, s, n)
		}
	})
}
