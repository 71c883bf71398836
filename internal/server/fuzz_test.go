package server

import (
	"context"
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

// FuzzLiteralPath: validationPath reads a client's document (one the validator
// refused) at a place the validator named; whatever the document and the
// place, it answers a path or "" without panicking, and the path it names
// for a literal it finds starts with an argument's name.
func FuzzLiteralPath(f *testing.F) {
	f.Add(`{ tenant(tenantId: "acme") { instances(first: 1.5) { totalCount } } }`, 1, 47)
	f.Add(`mutation { m(input: {a: [1, {b: 2}], c: {d: 3}}) { x } }`, 1, 33)
	f.Add(`fragment F on T { f(x: [[[1]]]) { y } } { ...F }`, 1, 26)
	f.Add(`query($v: Int = 1.5) { f(a: $v) }`, 1, 17)
	f.Fuzz(func(t *testing.T, q string, line, col int) {
		p := validationPath(withLiterals(context.Background()), q, "Int cannot represent non-integer value: 1.5", line, col)
		if strings.HasPrefix(p, ".") || strings.HasPrefix(p, "[") {
			t.Fatalf("%q at %d:%d: %q", q, line, col, p)
		}
	})
}
