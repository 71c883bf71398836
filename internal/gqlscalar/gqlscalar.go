// Package gqlscalar holds the graph's scalar bindings that differ from
// gqlgen's defaults.
package gqlscalar

import (
	"github.com/99designs/gqlgen/graphql"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pgtext"
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
