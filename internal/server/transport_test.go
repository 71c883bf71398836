package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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

// A socket's silence is judged only by a ping timer that fired on time: a
// replica stopped for 20 s (SIGSTOP, a VM pause) found every client silent
// for 31 s on waking, their pongs unread in the sockets, and closed them
// all with 1008.
func TestSilenceJudgedOnlyOnTime(t *testing.T) {
	const interval, timeout = 15 * time.Second, 30 * time.Second
	t0 := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name       string
		now, heard time.Time
		want       bool
	}{
		{"heard lately", t0, t0.Add(-10 * time.Second), false},
		{"silent past the timeout, timer on time", t0.Add(time.Second), t0.Add(-40 * time.Second), true},
		{"silent past the timeout, timer 20 s late (the process was stopped)", t0.Add(20 * time.Second), t0.Add(-11 * time.Second), false},
		{"silent, timer late by less than half an interval", t0.Add(7 * time.Second), t0.Add(-40 * time.Second), true},
	} {
		if got := silentTooLong(c.now, t0, c.heard, interval, timeout); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
