package server

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// The response type follows the client's q-values: a type refused with
// q=0 is never chosen, a preferred one wins over one named first.
func TestResponseTypeNegotiation(t *testing.T) {
	for _, c := range []struct{ accept, want string }{
		{"", mediaJSON},
		{"*/*", mediaJSON},
		{"application/*", mediaJSON},
		{"application/json", mediaJSON},
		{"application/graphql-response+json", mediaGraphQLJSON},
		{"application/graphql-response+json, application/json", mediaGraphQLJSON},
		{"application/json, application/graphql-response+json", mediaJSON},
		{"application/json;q=0.5, application/graphql-response+json", mediaGraphQLJSON},
		{"application/json;q=0, */*", mediaGraphQLJSON},
		{"application/graphql-response+json;q=0, */*", mediaJSON},
		{"application/graphql-response+json, */*", mediaGraphQLJSON},
		{"*/*;q=0.1, application/json;q=0.2", mediaJSON},
		{"application/json;q=0", mediaGraphQLJSON},
		{"text/html", mediaGraphQLJSON},
		{"application/json;q=2, application/graphql-response+json;q=0.9", mediaGraphQLJSON}, // a q past 1 is no range
		{"application/json;q=abc", mediaGraphQLJSON},
		{"application/graphql-response+json; charset=utf-8; q=0.9, application/json; q=0.8", mediaGraphQLJSON},
	} {
		r := httptest.NewRequest("POST", "/graphql", nil)
		if c.accept != "" {
			r.Header.Set("Accept", c.accept)
		}
		if got := responseType(r); got != c.want {
			t.Errorf("Accept %q: %s, want %s", c.accept, got, c.want)
		}
	}
}

// A body nested past encoding/json's 10000 levels is refused for its
// depth, not as "not a JSON object with a query" (it may well be one).
func TestDeepBody(t *testing.T) {
	for _, n := range []int{10001, 100000} {
		for _, b := range []string{
			`{"query":"{ viewer { kind } }","variables":{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`,
			strings.Repeat("[", n) + strings.Repeat("]", n),
		} {
			_, err := DecodeParams([]byte(b))
			if err == nil || err.Message != "the body nests deeper than 10000 levels" {
				t.Errorf("%d levels, %.30s: %v", n, b, err)
			}
		}
	}
	// 10000 levels are encoding/json's own: decoded
	b := `{"query":"{ viewer { kind } }","variables":{"a":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}}`
	if _, err := DecodeParams([]byte(b)); err != nil {
		t.Errorf("9998 levels in variables: %v", err)
	}
}
