package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/executor"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/resolvers"
)

// hostileDocuments are the most expensive documents to parse and validate:
// some just inside the bounds (they are validated), some just outside
// (refused before validation).
func hostileDocuments() map[string]string {
	docs := map[string]string{}
	// Inside: 46 response names, each answered 64 times (MaxSameName).
	var b strings.Builder
	b.WriteString("{")
	for n := 0; n < 46; n++ {
		for i := 0; i < MaxSameName; i++ {
			fmt.Fprintf(&b, " n%d: __typename", n)
		}
	}
	b.WriteString(" }")
	docs["inside: 2944 fields, 64 per name"] = b.String()
	// Inside: one name 64 times with a nested selection each.
	b.Reset()
	b.WriteString("{")
	for i := 0; i < MaxSameName; i++ {
		b.WriteString(" viewer { tenants(first: 1) { edges { node { tenantId name pools(first: 1) { totalCount } } } } }")
	}
	b.WriteString(" }")
	docs["inside: 64 same-name nested selections"] = b.String()
	// Inside: 40 fragments of 70 fields spread into one selection set.
	b.Reset()
	b.WriteString("query { viewer { ")
	for f := 0; f < 40; f++ {
		fmt.Fprintf(&b, "...F%d ", f)
	}
	b.WriteString("} }\n")
	for f := 0; f < 40; f++ {
		fmt.Fprintf(&b, "fragment F%d on Viewer {", f)
		for i := 0; i < 70; i++ {
			fmt.Fprintf(&b, " a%d: kind", i)
		}
		b.WriteString(" }\n")
	}
	docs["inside: 40 fragments x 70 fields"] = b.String()
	// Outside: 46 fragments of one name 64 times, spread into one set
	// (counted per fragment body, it was validated: 0.45 s).
	docs["outside: 46 fragments x 64 same-name fields"] = sameNameFragments(46, 64)
	// Outside: 46 same-name parents of 64 same-name fields each (their
	// selections merge).
	docs["outside: 46 same-name parents x 64 same-name fields"] = "{" + strings.Repeat(` t: tenant(tenantId: "acme") {`+strings.Repeat(" tenantId", 64)+" }", 46) + " }"
	// Outside: many operations spreading one fragment within the bounds
	// (validation walks it for each; 1156 of them took 13.8 s).
	b.Reset()
	b.WriteString(`fragment F on Query { v: tenant(tenantId: "acme") {`)
	for i := 0; i < 64; i++ {
		b.WriteString(` a: computeNode(nodeId: "n") {`)
		for x := 0; x < 38; x++ {
			fmt.Fprintf(&b, " x%d: __typename", x)
		}
		b.WriteString(" }")
	}
	b.WriteString(" } }")
	for i := 0; i < 1156; i++ {
		fmt.Fprintf(&b, " query q%d { ...F }", i)
	}
	docs["outside: 1156 operations spreading one fragment of 2497 fields"] = b.String()
	// Outside: doubling fragments, repeated fields, too many tokens.
	b.Reset()
	b.WriteString("query { ...F0 }\n")
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&b, "fragment F%d on Query { ...F%d ...F%d }\n", i, i+1, i+1)
	}
	b.WriteString("fragment F60 on Query { viewer { kind } }\n")
	docs["outside: 60 levels of doubling fragments"] = b.String()
	docs["outside: 14000 repeated fields"] = "{" + strings.Repeat(" __typename", 14000) + " }"
	docs["outside: 90000 tokens (about 1 MB)"] = "{" + strings.Repeat(" __typename", 90000) + " }"
	return docs
}

// BenchmarkHostileDocuments measures the CPU a hostile document costs
// before it runs or is refused (the goal: under 100 ms each).
func BenchmarkHostileDocuments(b *testing.B) {
	es := graph.NewExecutableSchema(graph.Config{Resolvers: &resolvers.Resolver{}})
	exec := executor.New(es)
	exec.SetParserTokenLimit(MaxTokens)
	exec.Use(newBoundsUncached())
	exec.Use(&cost{})
	for name, doc := range hostileDocuments() {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				ctx := graphql.StartOperationTrace(context.Background())
				exec.CreateOperationContext(ctx, &graphql.RawParams{Query: doc + fmt.Sprintf("\n# %d", i)})
			}
		})
	}
}

// sameNameFragments is a document of n fragments on Viewer, each answering
// name k times, all spread into one selection set.
func sameNameFragments(n, k int) string {
	var b strings.Builder
	b.WriteString("{ viewer {")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " ...F%d", i)
	}
	b.WriteString(" } }")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " fragment F%d on Viewer {%s }", i, strings.Repeat(" name", k))
	}
	return b.String()
}

// Fields a fragment spread brings into a selection set count with the
// set's own under each response name, nested spreads and inline
// fragments too: validation merges them.
func TestFragmentsCountSameNames(t *testing.T) {
	for doc, refused := range map[string]bool{
		sameNameFragments(46, 64): true,
		sameNameFragments(2, 33):  true,
		sameNameFragments(2, 32):  false,
		sameNameFragments(1, 64):  false,
		// Nested: F spreads G twice (32 + 32) beside 1 of its own.
		"{ viewer { ...F } } fragment F on Viewer { name ...G ...G } fragment G on Viewer {" + strings.Repeat(" name", 32) + " }": true,
		"{ viewer { ...F } } fragment F on Viewer { ...G ...G } fragment G on Viewer {" + strings.Repeat(" name", 32) + " }":      false,
		"{ viewer { ...F ... on Viewer { name } } } fragment F on Viewer {" + strings.Repeat(" name", 64) + " }":                  true,
		// Fields of one name merge with their selections: 46 aliases t,
		// each selecting tenantId 64 times, are 2944 at t.tenantId (a
		// helper's probe: 0.45 s of validation), directly or through
		// fragments on Query.
		"{" + strings.Repeat(` t: tenant(tenantId: "acme") {`+strings.Repeat(" tenantId", 64)+" }", 46) + " }": true,
		"{" + strings.Repeat(` t: tenant(tenantId: "acme") {`+strings.Repeat(" tenantId", 32)+" }", 2) + " }":  false,
		"{" + strings.Repeat(` t: tenant(tenantId: "acme") {`+strings.Repeat(" tenantId", 33)+" }", 2) + " }":  true,
		// The bound is the document's: two operations of 1600 fields.
		"query a { ...F } query b { ...F } fragment F on Query {" + aliases(1600) + " }": true,
		"query a { ...F } query b { ...F } fragment F on Query {" + aliases(1500) + " }": false,
		"{ ...A ...B } fragment A on Query { t: tenant(tenantId: \"a\") {" + strings.Repeat(" tenantId", 40) + " } } fragment B on Query { t: tenant(tenantId: \"a\") {" + strings.Repeat(" tenantId", 40) + " } }": true,
	} {
		e := checkDocument(doc)
		if got := e != nil; got != refused {
			t.Errorf("%.80s: refused %v (%v), want %v", doc, got, e, refused)
		}
		if e != nil && e.Extensions["details"].(map[string]any)["reason"] != "fields" {
			t.Errorf("%.80s: %v %v", doc, e, e.Extensions)
		}
	}
}

// A string literal escaping half a surrogate pair is refused as the same
// string in a variable is (gqlparser stored U+FFFD for it); a pair, a
// block string's or a comment's text are not escapes of a string.
func TestLoneSurrogateLiterals(t *testing.T) {
	for doc, refused := range map[string]bool{
		`mutation { createProject(input: {tenantId: "acme", name: "a\udc00b"}) { project { name } } }`: true,
		`{ tenant(tenantId: "\ud800") { name } }`:                                                      true,
		`{ tenant(tenantId: "\ud800\u0041") { name } }`:                                                true,
		`{ tenant(tenantId: "x\"\udfff") { name } }`:                                                   true,
		`{ tenant(tenantId: "\ud83d\ude00") { name } }`:                                                false,
		`{ tenant(tenantId: "\\udc00") { name } }`:                                                     false,
		`{ tenant(tenantId: """\udc00""") { name } }`:                                                  false,
		"# \"\\udc00\"\n{ tenant(tenantId: \"acme\") { name } }":                                       false,
		`{ tenant(tenantId: """a \""" \udc00 """) { name } }`:                                          false,
		`{ tenant(tenantId: "ok") { name } } # \udc00`:                                                 false,
	} {
		e := checkDocument(doc)
		if got := e != nil && strings.Contains(e.Message, "surrogate"); got != refused {
			t.Errorf("%s: refused %v (%v), want %v", doc, got, e, refused)
		}
	}
}

// aliases is n fields answering under n names.
func aliases(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " a%d: __typename", i)
	}
	return b.String()
}
