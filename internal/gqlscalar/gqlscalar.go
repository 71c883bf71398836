// Package gqlscalar holds the graph's scalar bindings that differ from
// gqlgen's defaults.
package gqlscalar

import (
	"encoding/json"
	"io"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonnum"
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

// MarshalJSONValue writes a JSON value as gqlgen's Any does, without the
// line break its encoder put after each value.
func MarshalJSONValue(v any) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err) // as graphql.MarshalAny: the field's error, INTERNAL
		}
		_, _ = w.Write(b)
	})
}

// UnmarshalJSONValue takes any JSON value whose numbers the method surface
// takes in free-form content (jsonnum.Bounded: at most 64 digits written
// out in full), and refuses the rest INVALID_INPUT in its words. It was
// gqlgen's Any: 1e131071 was stored, and written out in 131,072 digits on
// every read.
func UnmarshalJSONValue(v any) (any, error) {
	if at, bad := jsonnum.Unbounded("", v); bad {
		// The place inside the value goes in details.within: the
		// presenter joins it to the argument's path, so the graph's path
		// is the method's (policy.x.a[1], not policy).
		e := errs.E(errs.InvalidInput, "has more than %d digits written out in full", jsonnum.MaxDigits)
		if at != "" {
			e = e.With(errs.Within, at)
		}
		return nil, e
	}
	return v, nil
}

// MarshalTime writes a Time (RFC 3339 with fractional seconds, as gqlgen's).
func MarshalTime(t time.Time) graphql.Marshaler { return graphql.MarshalTime(t) }

// UnmarshalTime accepts what the method surface's time fields accept
// (rfc3339.ParseExact) and answers the rest INVALID_INPUT with the same words;
// gqlgen's own also took "2006-01-02 15:04:05" and "" (as no time), and
// answered anything else with an error of its own, INTERNAL to a client.
func UnmarshalTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, errs.E(errs.InvalidInput, "must be an RFC 3339 time, as a string")
	}
	// To the nanosecond: the graph's times in are audit logs' since and
	// until, which audit.NewFilter rounds up to the records' microsecond.
	t, problem := rfc3339.ParseExact(s)
	if problem != "" {
		return time.Time{}, errs.E(errs.InvalidInput, "%s", problem)
	}
	return t, nil
}
