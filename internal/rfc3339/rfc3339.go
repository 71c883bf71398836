// Package rfc3339 reads the times of every input, once: the method
// surface's time fields (audit.list's since and until, a reservation's
// window, an inventory report's collectedAt) and the graph's Time scalar
// accept the same spellings and say the same thing about the rest.
package rfc3339

import (
	"time"

	"github.com/bettercompute/computed/internal/errs"
)

// Parse reads an RFC 3339 time (fractional seconds optional). problem is
// "" or what is wrong with s, to follow the name of its field. Years before
// 0001 are refused: RFC 3339 has a year 0, and PostgreSQL's timestamps and
// Go's encoders of them do not agree about it.
func Parse(s string) (t time.Time, problem string) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, "must be an RFC 3339 time"
	}
	if t.UTC().Year() < 1 || t.UTC().Year() > 9999 {
		return time.Time{}, "must be a time in the years 0001 to 9999"
	}
	return t, ""
}

// Field reads the time of the input field at path: INVALID_INPUT naming it
// when s is not one.
func Field(path, s string) (time.Time, error) {
	t, problem := Parse(s)
	if problem != "" {
		return time.Time{}, errs.Invalid(path, "%s %s", path, problem)
	}
	return t, nil
}
