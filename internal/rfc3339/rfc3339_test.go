package rfc3339

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for s, want := range map[string]string{
		"2026-12-05T17:00:00Z":           "",
		"2026-12-05T17:00:00.123456789Z": "",
		"2026-12-05T17:00:00+02:00":      "",
		"0001-01-01T00:00:00Z":           "",
		"9999-12-31T23:59:59Z":           "",
		"0000-01-01T00:00:00Z":           "must be a time in the years 0001 to 9999",
		"0001-01-01T00:00:00+01:00":      "must be a time in the years 0001 to 9999", // year 0 in UTC
		"9999-12-31T23:59:59-01:00":      "must be a time in the years 0001 to 9999", // year 10000 in UTC
		"2026-12-05":                     "must be an RFC 3339 time",
		"2026-12-05 17:00:00":            "must be an RFC 3339 time",
		"":                               "must be an RFC 3339 time",
		"yesterday":                      "must be an RFC 3339 time",
		"2026-13-05T17:00:00Z":           "must be an RFC 3339 time",
		"2026-12-05T17:00:00Z trailing":  "must be an RFC 3339 time",
		"2026-12-05T17:00:00\x00Z":       "must be an RFC 3339 time",
	} {
		if _, got := Parse(s); got != want {
			t.Errorf("%q: %q, want %q", s, got, want)
		}
	}
	// kept to the microsecond: two ends a nanosecond apart are one instant
	a, _ := Parse("2026-12-06T17:54:24Z")
	b, _ := Parse("2026-12-06T17:54:24.000000001Z")
	c, _ := Parse("2026-12-06T17:54:24.0000019Z")
	if !a.Equal(b) || c.Nanosecond() != 1000 {
		t.Fatalf("%v %v %v", a, b, c)
	}
	// any number of fraction digits, as RFC 3339's time-secfrac (more
	// than nine were refused)
	d, problem := Parse("2026-12-06T14:36:48.1234567891+01:00")
	if problem != "" || d.Nanosecond() != 123456000 || d.Hour() != 14 {
		t.Fatalf("ten digits: %v %q", d, problem)
	}
	if e, problem := Parse("2026-12-06T14:36:48." + strings.Repeat("9", 200) + "Z"); problem != "" || e.Second() != 48 {
		t.Fatalf("200 digits: %v %q", e, problem)
	}
	// ParseExact keeps the nanosecond, and a digit past it rounds up: a
	// bound a fraction past a record is past it.
	if f, _ := ParseExact("2026-12-06T14:36:48.7052770001Z"); f.Nanosecond() != 705277001 {
		t.Fatalf("ParseExact, ten digits: %v", f)
	}
	if f, _ := ParseExact("2026-12-06T14:36:48.7052770000Z"); f.Nanosecond() != 705277000 {
		t.Fatalf("ParseExact, zeros past nine digits: %v", f)
	}
	if _, err := Field("since", "nope"); err == nil || !strings.Contains(err.Error(), "since must be an RFC 3339 time") {
		t.Fatalf("Field: %v", err)
	}
}

// What Parse takes is a time of the years 0001 to 9999 that reads back as
// the same instant from its RFC 3339 text.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"2026-12-05T17:00:00Z", "0000-01-01T00:00:00Z", "2026-12-05T17:00:00.5+14:00", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, problem := Parse(s)
		if problem != "" {
			return
		}
		if !utf8.ValidString(s) {
			t.Fatalf("%q: invalid UTF-8 taken", s)
		}
		if y := tm.UTC().Year(); y < 1 || y > 9999 {
			t.Fatalf("%q: year %d", s, y)
		}
		back, problem := Parse(tm.Format(time.RFC3339Nano))
		if problem != "" || !back.Equal(tm) {
			t.Fatalf("%q: %v does not read back (%q)", s, tm, problem)
		}
	})
}
