package profiles

import (
	"math"
	"strings"
	"testing"
)

// The longest profile list cursor (a 128-character id, the largest version)
// is within the seed's 256 characters for a cursor.
func TestLongestCursorFitsTheSeedsBound(t *testing.T) {
	p := &Profile{ProfileID: strings.Repeat("a", 128), ProfileVersion: math.MaxInt32, TenantID: strings.Repeat("t", 128)}
	if c := CursorOf(p); len(c) > 256 || CheckCursor(c) != nil {
		t.Fatalf("%d characters: %q", len(c), c)
	}
}
