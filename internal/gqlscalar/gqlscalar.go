// Package gqlscalar holds the graph's scalar bindings that differ from
// gqlgen's defaults.
package gqlscalar

import (
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pgtext"
	"github.com/bettercompute/computed/internal/rfc3339"
)

// MarshalString writes a String.
func MarshalString(s string) graphql.Marshaler { return graphql.MarshalString(s) }

// UnmarshalString accepts only strings: a JSON number in a variable is an
// error, as it is on the method surface (gqlgen would stringify it). NUL
// characters are refused because PostgreSQL text cannot hold them.
func UnmarshalString(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", errs.E(errs.InvalidInput, "must be a string")
	}
	if pgtext.HasNUL(s) {
		return "", errs.E(errs.InvalidInput, "must not contain NUL characters")
	}
	return s, nil
}

// MarshalTime writes a Time (RFC 3339 with fractional seconds, as gqlgen's).
func MarshalTime(t time.Time) graphql.Marshaler { return graphql.MarshalTime(t) }

// UnmarshalTime accepts what the method surface's time fields accept
// (rfc3339.Parse) and answers the rest INVALID_INPUT with the same words;
// gqlgen's own also took "2006-01-02 15:04:05" and "" (as no time), and
// answered anything else with an error of its own, INTERNAL to a client.
func UnmarshalTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, errs.E(errs.InvalidInput, "must be an RFC 3339 time, as a string")
	}
	t, problem := rfc3339.Parse(s)
	if problem != "" {
		return time.Time{}, errs.E(errs.InvalidInput, "%s", problem)
	}
	return t, nil
}
