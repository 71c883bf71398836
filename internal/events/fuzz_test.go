package events_test

import (
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
)

// FuzzParseCursor: a cursor (after, cursor: untrusted) is either refused
// with INVALID_INPUT or INVALID_STATE, or it is exactly the id of a number
// of the tenant's stream: one spelling per id. Number 0 is the stream's
// start (an empty page's endCursor), and it too has one spelling.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "evt_", events.EncodeID("acme", 0), events.EncodeID("acme", 1), events.EncodeID("acme", 1<<63), events.EncodeID("globex", 7),
		"evt_00000000000h3k00000000004x", "evt_85tdswe6vzd7q0000000000001", "evt_zzzzzzzzzzzzzzzzzzzzzzzzzz", "evt_\xff"} {
		f.Add("acme", s)
	}
	f.Fuzz(func(t *testing.T, tenant, cursor string) {
		seq, err := events.ParseCursor("after", tenant, cursor)
		if err != nil {
			if c := errs.CodeOf(err); c != errs.InvalidInput && c != errs.InvalidState {
				t.Fatalf("%q: %v", cursor, err)
			}
			return
		}
		if cursor == "" {
			if seq != 0 {
				t.Fatalf("no cursor is %d", seq)
			}
			return
		}
		if events.EncodeID(tenant, seq) != cursor {
			t.Fatalf("%q of %q accepted as %d (%s)", cursor, tenant, seq, events.EncodeID(tenant, seq))
		}
		if any, err := events.ParseAnyCursor("after", cursor); err != nil || any.Seq != seq || any.Hash != events.TenantHash(tenant) {
			t.Fatalf("%q: ParseAnyCursor %+v %v", cursor, any, err)
		}
	})
}
