package server

import (
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonkeys"
)

// FuzzDecodeParams feeds untrusted bodies to the GraphQL request decoder:
// it never panics, every refusal is INVALID_INPUT, and no refusal echoes
// the body or names a Go type.
func FuzzDecodeParams(f *testing.F) {
	for _, s := range []string{
		`{"query":"{ viewer { kind } }"}`, `{"query":"q","variables":{"a":1},"operationName":"Op","extensions":{}}`,
		`{"query":5}`, `{"query":"q"}}`, `[{"query":"q"}]`, `null`, `{}`, `{"query":"q","variables":[1]}`,
		`{"query":null}`, "{\"query\":\"\xff\"}", `{"query":"q","operationName":{}}`, ``, `{"query":"q","query":"r"}`, `{"query":"q","variables":{"a":{"b":1,"b":2}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeParams(body)
		if err != nil {
			if err.Code != errs.InvalidInput {
				t.Fatalf("refusal with code %s", err.Code)
			}
			for _, leak := range []string{"json:", "Go value", "unmarshal", "%!"} {
				if strings.Contains(err.Message, leak) {
					t.Fatalf("refusal names internals: %q", err.Message)
				}
			}
			return
		}
		if p == nil {
			t.Fatal("no params and no error")
		}
		if path, dup := jsonkeys.Duplicate(body); dup {
			t.Fatalf("accepted a body with the key %s twice", path)
		}
	})
}

// FuzzCheckDocument feeds untrusted documents to the bounds walk that runs
// before gqlgen parses and validates: it never panics or loops.
func FuzzCheckDocument(f *testing.F) {
	for _, s := range []string{
		`{ viewer { kind } }`, `query { ...A } fragment A on Query { ...A }`,
		`query { ...F0 } fragment F0 on Query { ...F1 ...F1 } fragment F1 on Query { viewer { kind } }`,
		`{ __schema { types { fields { type { ofType { name } } } } } }`, `{ a: __typename a: __typename }`,
		`subscription { x }`, `{`, `fragment F on Query { ...G }`, `{ ... on Query { ... { __typename } } }`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if e := checkDocument(doc); e != nil && e.Message == "" {
			t.Fatal("a refusal without a message")
		}
	})
}
