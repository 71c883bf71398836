package page

import (
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
