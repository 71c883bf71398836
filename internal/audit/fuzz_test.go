package audit

import (
	"testing"
	"time"
)

// FuzzCursorKey: a cursor key from a client (audit.list's cursor, the
// graph's after) never panics, and one that is accepted is a time and an
// audit id that CursorKey writes back as it was read.
func FuzzCursorKey(f *testing.F) {
	r := Record{AuditID: "aud_01m8yw278hexz7cwer5ekqft0d", OccurredAt: time.Date(2026, 12, 3, 21, 13, 15, 810502000, time.UTC)}
	f.Add(CursorKey(&r))
	f.Add("")
	f.Add("2026-12-03T21:13:15Z aud_x")
	f.Add("not a key")
	f.Fuzz(func(t *testing.T, k string) {
		at, id, err := parseCursorKey(k)
		if err != nil || k == "" {
			return
		}
		back := CursorKey(&Record{AuditID: id, OccurredAt: *at})
		if _, id2, err := parseCursorKey(back); err != nil || id2 != id {
			t.Fatalf("%q -> %q does not read back: %v", k, back, err)
		}
	})
}
