// Package gqlscalar holds the graph's scalar bindings that differ from
// gqlgen's defaults.
package gqlscalar

import (
	"fmt"
	"strings"

	"github.com/99designs/gqlgen/graphql"
)

// MarshalString writes a String.
func MarshalString(s string) graphql.Marshaler { return graphql.MarshalString(s) }

// UnmarshalString accepts only strings: a JSON number in a variable is an
// error, as it is on the method surface (gqlgen would stringify it). NUL
// characters are refused because PostgreSQL text cannot hold them.
func UnmarshalString(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%T is not a String", v)
	}
	if strings.ContainsRune(s, 0) {
		return "", fmt.Errorf("a String must not contain NUL characters")
	}
	return s, nil
}
