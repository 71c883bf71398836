// Package rfc3339 reads the times of every input, once: the method
// surface's time fields (audit.list's since and until, a reservation's
// window, an inventory report's collectedAt) and the graph's Time scalar
// accept the same spellings and say the same thing about the rest.
package rfc3339

import (
	"regexp"
	"strings"
	"time"

	"github.com/bettercompute/computed/internal/errs"
)

// syntax is RFC 3339's date-time (section 5.6): a full date, T, a time
// with optional fractional seconds, and Z or an offset of at most 23:59.
// T and Z may be lower case. Go's parser alone also took an offset of
// +24:00 and a comma before the fraction, and refused t and z.
// The fraction takes any number of digits, as RFC 3339's time-secfrac
// does ("." 1*DIGIT): past nine, Go's parser refuses them, and they are cut
// (the time is kept to the microsecond anyway).
var syntax = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$`)

// Parse reads an RFC 3339 time (fractional seconds optional), kept to the
// microsecond as PostgreSQL keeps it: a window whose two ends differed by
// a nanosecond passed the check that its end is after its start and then
// broke the database's. problem is "" or what is wrong with s, to follow
// the name of its field. Years before 0001 are refused: RFC 3339 has a
// year 0, and PostgreSQL's timestamps and Go's encoders of them do not
// agree about it.
func Parse(s string) (t time.Time, problem string) {
	t, problem = parse(s, false)
	return t.Truncate(time.Microsecond), problem
}

// ParseExact is Parse to the nanosecond, for a bound whose reader rounds
// it (audit.list's since and until round up to the microsecond: truncated,
// a bound a fraction after a record kept it).
func ParseExact(s string) (t time.Time, problem string) { return parse(s, true) }

// parse reads s to the nanosecond; digits past it round the time up when
// up is set, and are cut otherwise.
func parse(s string, up bool) (t time.Time, problem string) {
	if !syntax.MatchString(s) {
		return time.Time{}, "must be an RFC 3339 time"
	}
	var past bool // a digit past the nanosecond that is not 0
	if m := syntax.FindStringSubmatchIndex(s); m[2] >= 0 && m[3]-m[2] > 10 {
		past = strings.Trim(s[m[2]+10:m[3]], "0") != ""
		s = s[:m[2]+10] + s[m[3]:] // the point and nine digits
	}
	t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
	if past && up {
		// Rounded up, as the bounds that round to the microsecond need
		// (cut, a bound a fraction past a record kept it).
		t = t.Add(time.Nanosecond)
	}
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
	t, err := FieldExact(path, s)
	return t.Truncate(time.Microsecond), err
}

// FieldExact is Field to the nanosecond (ParseExact).
func FieldExact(path, s string) (time.Time, error) {
	t, problem := ParseExact(s)
	if problem != "" {
		return time.Time{}, errs.Invalid(path, "%s %s", path, problem)
	}
	return t, nil
}
