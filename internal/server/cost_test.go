package server

import (
	"fmt"
	"sort"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/internal/page"
)

// Every connection of the schema is costed by the one rule (1 + first ×
// its children): the walk finds each field that returns a list of edges
// with pageInfo, whatever its type is called, and fails unless the rule
// recognises it (IsConnection) and it takes first and after. A list field
// that is not a connection is unpaged and must stay small: it is listed
// here, so adding one is a decision.
func TestEveryConnectionHasACost(t *testing.T) {
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	unpaged := map[string]bool{} // Type.field of list fields that are not connections
	looksLikeConnection := func(typeName string) bool {
		def := schema.Types[typeName]
		if def == nil || def.Kind != ast.Object {
			return false
		}
		edges, info := def.Fields.ForName("edges"), def.Fields.ForName("pageInfo")
		return edges != nil && edges.Type.Elem != nil && info != nil
	}
	var names []string
	for name := range schema.Types {
		names = append(names, name)
	}
	sort.Strings(names)
	connections := 0
	for _, name := range names {
		def := schema.Types[name]
		if def.Kind != ast.Object || def.BuiltIn || len(name) > 1 && name[:2] == "__" || looksLikeConnection(name) {
			continue
		}
		for _, f := range def.Fields {
			switch {
			case looksLikeConnection(f.Type.Name()):
				connections++
				if !IsConnection(f) {
					t.Errorf("%s.%s returns a connection (%s) that the cost rule does not recognise: name its type ...Connection", name, f.Name, f.Type.Name())
				}
				if f.Arguments.ForName("first") == nil || f.Arguments.ForName("after") == nil {
					t.Errorf("%s.%s is a connection without first and after", name, f.Name)
				}
				if schema.Types[f.Type.Name()].Fields.ForName("totalCount") == nil {
					t.Errorf("%s has no totalCount (the contract's connections have edges, pageInfo and totalCount)", f.Type.Name())
				}
			case IsConnection(f):
				t.Errorf("%s.%s returns %s, named like a connection but without edges and pageInfo", name, f.Name, f.Type.Name())
			case f.Type.Elem != nil:
				unpaged[name+"."+f.Name] = true
			}
		}
	}
	if connections == 0 {
		t.Fatal("the walk found no connection")
	}
	// Lists of a bounded size, unpaged and costed as one field: devices of
	// one snapshot, steps of one document or workflow, a pool's handful of
	// offers, issues of one validation, a diff's changes, one machine's
	// MACs. A new list is a connection or joins this list knowingly.
	bounded := map[string]bool{}
	for _, k := range []string{"Gpu.migDevices", "InventoryDiff.changes", "InventorySnapshot.disks", "InventorySnapshot.drivers",
		"InventorySnapshot.gpus", "InventorySnapshot.nics", "NodeHardware.macs", "Pool.offers", "PoolCapacity.byTenant", "Profile.rendered",
		"ProfileValidation.issues", "Workflow.steps"} {
		bounded[k] = true
	}
	for _, k := range keys(unpaged) {
		if !bounded[k] {
			t.Errorf("%s is a list that is neither a connection nor a known bounded list: page it as a connection", k)
		}
	}

	// The rule itself: a connection costs 1 + first × what it reads per
	// item (edges, nodes; at least 1) + what it reads once (totalCount,
	// pageInfo),
	// nested connections multiply, a missing first counts the default, and
	// fragments count where they are spread. __schema has a fixed price.
	for _, c := range []struct {
		q    string
		want int
	}{
		// viewer 1 + tenants (1 + 3 × (edges 1 + node 1 + tenantId 1 + projects (1 + 50 × (edges 1 + node 1 + name 1))))
		{`{ viewer { tenants(first: 3) { edges { node { tenantId projects { edges { node { name } } } } } } } }`,
			1 + 1 + 3*(1+1+1+1+page.DefaultLimit*3)},
		// totalCount and pageInfo are read once, not per item (pageInfo cost
		// 1 + 200 × 2); an item costs 1 when nothing of it is selected (the
		// page is loaded whatever is selected)
		{`{ viewer { tenants(first: 3) { edges { node { projects { totalCount } } } } } }`, 1 + 1 + 3*(1+1+(1+1+page.DefaultLimit))},
		{`{ viewer { tenants(first: 200) { pageInfo { hasNextPage } } } }`, 1 + 1 + 2 + 200},
		// through fragments on the connection, spread twice
		{`{ viewer { tenants(first: 4) { ...T ...T } } } fragment T on TenantConnection { totalCount edges { node { tenantId } } }`,
			1 + 1 + 2*(1) + 4*2*(1+1+1)},
		{`{ __schema { types { name fields { name } } } }`, SchemaCost},
		// what will not run is not paid for
		{`{ viewer { a: tenants(first: 200) @skip(if: true) { edges { node { tenantId } } } b: tenants(first: 200) @include(if: false) { totalCount }
			... @include(if: false) { c: tenants(first: 200) { edges { node { tenantId } } } } kind @include(if: true) } }`, 1 + 1},
		{`{ __type(name: "Pool") { name fields { name } } }`, 1 + 1 + 1 + 1},
		// a count over a stream that grows with time costs what a request
		// does, however it is reached; other counts 1
		{`{ tenant(tenantId: "acme") { events(first: 10) { totalCount } auditLog(first: 1) { ...A } projects(first: 1) { totalCount } } }
			fragment A on AuditRecordConnection { totalCount edges { cursor } }`,
			1 + (1 + StreamCountCost + 10*1) + (1 + StreamCountCost + 1*(1+1)) + (1 + 1 + 1)},
	} {
		doc, errs := gqlparser.LoadQueryWithRules(schema, c.q, nil)
		if errs != nil {
			t.Fatal(errs)
		}
		if got := OperationCost(schema, doc.Operations[0], nil); got != c.want {
			t.Errorf("%s: cost %d, want %d", c.q, got, c.want)
		}
	}
	doc, errs := gqlparser.LoadQueryWithRules(schema, `query($x: Boolean!) { viewer { tenants(first: 200) @include(if: $x) { totalCount } } }`, nil)
	if errs != nil {
		t.Fatal(errs)
	}
	for x, want := range map[bool]int{false: 1, true: 1 + 1 + 1 + 200} {
		if got := OperationCost(schema, doc.Operations[0], map[string]any{"x": x}); got != want {
			t.Errorf("@include(if: $x) with x %v: cost %d, want %d", x, got, want)
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A connection's first given as null is charged as its resolver pages it:
// the default its schema states (inventoryHistory's 20 was charged as the
// general 50), the same as first left out.
func TestANullFirstCostsTheStatedDefault(t *testing.T) {
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	cost := func(q string, vars map[string]any) int {
		t.Helper()
		doc, err := gqlparser.LoadQuery(schema, q)
		if err != nil {
			t.Fatal(err)
		}
		return OperationCost(schema, doc.Operations[0], vars)
	}
	const f = `{ node(id: "x") { ... on ComputeNode { inventoryHistory%s { edges { node { snapshotId } } } } } }`
	const v = `query($f: Int) { node(id: "x") { ... on ComputeNode { inventoryHistory(first: $f) { edges { node { snapshotId } } } } } }`
	omitted := cost(fmt.Sprintf(f, ""), nil)
	for what, got := range map[string]int{
		"first: null": cost(fmt.Sprintf(f, "(first: null)"), nil),
		"first: 20":   cost(fmt.Sprintf(f, "(first: 20)"), nil),
		"$f null":     cost(v, map[string]any{"f": nil}),
		"$f absent":   cost(v, nil),
	} {
		if got != omitted {
			t.Errorf("inventoryHistory(%s): cost %d, first left out %d", what, got, omitted)
		}
	}
	if got := cost(fmt.Sprintf(f, "(first: 50)"), nil); got <= omitted {
		t.Errorf("first: 50 costs %d, no more than the default 20's %d", got, omitted)
	}
}
