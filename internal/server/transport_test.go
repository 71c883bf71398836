package server

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/registry"
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

// Nesting is bound as the method surface bounds a body: variables (and
// extensions) may nest registry.MaxDepth levels below their own object, so
// a mutation's input nests as deep as the method's body may, and no
// deeper. Deeper values were decoded and walked before a resolver refused
// them: a body of 10000 levels in a JSON variable cost up to 2 s of CPU.
// The bound is read from the raw bytes, before anything is decoded, over
// POST bodies, socket payloads and GET parameters alike.
func TestDeepBody(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	// {"query":…,"variables":{"a":[…]}}: the body is level 1, variables 2,
	// the list's first bracket 3.
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{"query":"{ viewer { kind } }","variables":{"a":` + nest(registry.MaxDepth) + `}}`, true},
		{`{"query":"{ viewer { kind } }","variables":{"a":` + nest(registry.MaxDepth+1) + `}}`, false},
		{`{"query":"{ viewer { kind } }","extensions":{"a":` + nest(registry.MaxDepth+1) + `}}`, false},
		{`{"query":"{ viewer { kind } }","variables":{"a":` + nest(10001) + `}}`, false},
		{`{"query":"{ viewer { kind } }","variables":{"a":"` + nest(100) + `"}}`, true}, // brackets in a string
		{nest(100000), false},
		// Values: counted on the bytes, before anything decodes them.
		{`{"query":"{ viewer { kind } }","variables":{"a":[` + strings.Repeat("1,", 19000) + `1]}}`, true},
		{`{"query":"{ viewer { kind } }","variables":{"a":[` + strings.Repeat("1,", 21000) + `1]}}`, false},
		{`{"query":"{ viewer { kind } }","variables":{"a":"` + strings.Repeat(",", 100000) + `"}}`, true}, // commas in a string
		{`{"query":"{ viewer { kind } }","variables":{"a":[` + strings.Repeat("1,", 490000) + `1]}}`, false},
	} {
		_, err := DecodeParams([]byte(c.body))
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Message, "nests deeper than") && !strings.Contains(err.Message, "more than")) {
			t.Errorf("%.60s (%d bytes): %v", c.body, len(c.body), err)
		}
	}
	for _, c := range []struct {
		vars string
		ok   bool
	}{
		{`{"a":` + nest(registry.MaxDepth) + `}`, true},
		{`{"a":` + nest(registry.MaxDepth+1) + `}`, false},
	} {
		_, err := paramsFromQuery("query=%7Bviewer%7Bkind%7D%7D&variables=" + url.QueryEscape(c.vars))
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Message, "nests deeper than")) {
			t.Errorf("GET variables of %d bytes: %v", len(c.vars), err)
		}
	}
}

// A socket's silence is judged without the time the process did not run:
// a replica stopped for 20 s (SIGSTOP, a VM pause) found its clients silent
// for 31-34 s on waking, their pongs unread in the sockets, and closed them
// with 1008 (even when the ping timer fired on time after the stop).
func TestSilenceLeavesOutPauses(t *testing.T) {
	var p pauseClock
	t0 := time.Unix(1_000_000, 0)
	p.last.Store(t0.UnixNano())
	for i := 1; i <= 8; i++ { // two seconds of looks on time
		p.observe(t0.Add(time.Duration(i) * pauseTick))
	}
	if got := p.at(t0.Add(2 * time.Second)); got != 0 {
		t.Fatalf("pauses without a pause: %v", got)
	}
	heard := t0.Add(-14 * time.Second) // the last pong
	heardPaused := p.at(heard)
	// Stopped from t0+2 s for 19 s: a timer runs at once on waking,
	// before the clock's goroutine has looked.
	wake := t0.Add(21 * time.Second)
	paused := p.at(wake) - heardPaused
	if paused < 18*time.Second || paused > 19*time.Second {
		t.Fatalf("a 19 s stop counted as %v before the clock looked", paused)
	}
	if silentTooLong(wake, heard, paused, 30*time.Second) {
		t.Fatal("a client heard 14 s before a 19 s stop is judged silent on waking")
	}
	p.observe(wake)
	if got := p.at(wake) - heardPaused; got != paused {
		t.Fatalf("the stop counted as %v once looked at, %v before", got, paused)
	}
	// Without a stop, the same silence is judged.
	if !silentTooLong(wake, heard, 0, 30*time.Second) {
		t.Fatal("35 s of silence without a pause is not judged")
	}
	// A client silent through the stop and 31 s more is judged.
	if !silentTooLong(wake.Add(31*time.Second), wake.Add(-time.Second), 0, 30*time.Second) {
		t.Fatal("a client silent 32 s after the stop is not judged")
	}
}

// A GraphQL POST declares its body as JSON in UTF-8, once: a second
// Content-Type was ignored (the first won; a proxy may read the other) and
// a body declared in another charset was read as UTF-8.
func TestJSONBodyDeclared(t *testing.T) {
	for _, c := range []struct {
		types []string
		ok    bool
	}{
		{[]string{"application/json"}, true},
		{[]string{"application/json; charset=utf-8"}, true},
		{[]string{"Application/JSON; charset=UTF-8"}, true},
		{[]string{"application/json; charset=utf-16"}, false},
		{[]string{"application/json; charset=latin1"}, false},
		{[]string{"application/json; charset=utf8"}, true},
		{[]string{"application/json; charset=US-ASCII"}, true},
		{[]string{"application/json", "text/plain"}, false},
		{[]string{"application/json", "application/json"}, false},
		{[]string{"text/plain"}, false},
		{nil, false},
	} {
		r := httptest.NewRequest("POST", "/graphql", nil)
		for _, v := range c.types {
			r.Header.Add("Content-Type", v)
		}
		if err := jsonBody(r); c.ok != (err == nil) {
			t.Errorf("%q: %v", c.types, err)
		}
	}
}
