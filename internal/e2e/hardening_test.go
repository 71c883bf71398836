package e2e

import (
	_ "embed"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// graphql-js's getIntrospectionQuery (16.11, every option on): what
// GraphiQL, Apollo, urql and codegen tools send.
//
//go:embed testdata/introspection.graphql
var introspectionQuery string

// The standard introspection query nests type references about 15 levels
// deep; it is bounded by its own rule, not the data depth limit.
func TestStandardIntrospectionQuery(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	r := e.GraphQL(admin, introspectionQuery, nil)
	if r.Status != 200 || r.Body["errors"] != nil {
		t.Fatalf("introspection refused: %d %.300s", r.Status, r.Raw)
	}
	types := obj(t, r.Body, "data", "__schema")["types"].([]any)
	found := false
	for _, ty := range types {
		if ty.(map[string]any)["name"] == "ComputeNode" {
			found = true
		}
	}
	if !found {
		t.Fatalf("ComputeNode is not in the schema's types")
	}
	// Without a token there is no schema either.
	if r := e.GraphQL("", introspectionQuery, nil); r.Status != 401 {
		t.Fatalf("introspection without a token: %d", r.Status)
	}
	// Introspection still has bounds: many copies of __schema are refused.
	many := "{" + strings.Repeat(" a: __schema { types { name } }", 1)
	for i := 0; i < 8; i++ {
		many += " s" + string(rune('a'+i)) + ": __schema { types { name } }"
	}
	many += " }"
	if r := e.GraphQL(admin, many, nil); !strings.Contains(string(r.Raw), `"reason":"introspection"`) {
		t.Fatalf("nine __schema fields: %d %s", r.Status, r.Raw)
	}
}
