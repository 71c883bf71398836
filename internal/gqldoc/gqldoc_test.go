package gqldoc_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/gqldoc"
	"github.com/bettercompute/computed/internal/registry"
)

func parsed() *ast.Schema { return graph.NewExecutableSchema(graph.Config{}).Schema() }

// Every mutation names, in its description, the method its resolver
// calls, and that method is a mutation of the registry: a new mutation
// without it, or a key that drifted from its resolver, fails here.
func TestEveryMutationNamesItsMethod(t *testing.T) {
	reg := app.Registry(nil, nil, nil, nil)
	called := resolverMethods(t)
	for field, key := range gqldoc.Methods(parsed()) {
		if key == "" {
			t.Errorf("mutation %s: its description in schema/*.graphqls is not the key of the method its resolver calls", field)
			continue
		}
		g, n, _ := strings.Cut(key, ".")
		m, ok := reg.Lookup(g, n)
		if !ok || m.Kind != registry.Mutation {
			t.Errorf("mutation %s names %s, which is no mutation of the registry", field, key)
		}
		if called[field] != key {
			t.Errorf("mutation %s names %s; its resolver calls %q", field, key, called[field])
		}
	}
}

// resolverMethods reads, from resolvers/*.resolvers.go, the method key
// each mutation resolver calls.
func resolverMethods(t *testing.T) map[string]string {
	files, err := filepath.Glob("../../resolvers/*.resolvers.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("resolvers: %v", err)
	}
	fn := regexp.MustCompile(`func \(r \*mutationResolver\) (\w+)\(`)
	key := regexp.MustCompile(`"([a-zA-Z]+\.[a-zA-Z]+)"`)
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for _, loc := range fn.FindAllStringSubmatchIndex(src, -1) {
			body := src[loc[1]:]
			if end := strings.Index(body, "\nfunc "); end >= 0 {
				body = body[:end]
			}
			name := src[loc[2]:loc[3]]
			if k := key.FindStringSubmatch(body); k != nil {
				out[strings.ToLower(name[:1])+name[1:]] = k[1]
			}
		}
	}
	return out
}

// Describe gives every mutation the method's words and every field of its
// input the method's words for it, and leaves the shared parsed schema as
// it was.
func TestDescribeFromTheRegistry(t *testing.T) {
	reg := app.Registry(nil, nil, nil, nil)
	s := parsed()
	d := gqldoc.Describe(s, reg)
	m, _ := reg.Lookup("instances", "create")
	create := d.Mutation.Fields.ForName("createInstance")
	if !strings.HasPrefix(create.Description, m.Summary) || !strings.Contains(create.Description, "`instances.create`") ||
		!strings.Contains(create.Description, m.Notes[0]) {
		t.Fatalf("createInstance: %q", create.Description)
	}
	if got := create.Arguments.ForName("input").Description; !strings.Contains(got, "/api/compute/instances/create") {
		t.Fatalf("createInstance's input: %q", got)
	}
	in := d.Types["CreateInstanceInput"]
	if got := in.Fields.ForName("tenantId").Description; got != "The caller's tenant. At most 128 characters; matches `^[A-Za-z0-9._:-]{1,128}$`." {
		t.Fatalf("CreateInstanceInput.tenantId: %q", got)
	}
	// The schema's own words keep, with the method's constraints after them.
	if got := in.Fields.ForName("clientToken").Description; got != "An idempotency token: a retry with the same token and input returns the first instance. At most 64 characters; matches `^[\\x21-\\x7E]{1,64}$`." {
		t.Fatalf("CreateInstanceInput.clientToken: %q", got)
	}
	// An enum's values are the graph's, not the method surface's.
	if got := in.Fields.ForName("desiredState").Description; strings.Contains(got, "running") {
		t.Fatalf("CreateInstanceInput.desiredState: %q", got)
	}
	// Nested input objects too.
	if got := d.Types[in.Fields.ForName("size").Type.Name()].Fields.ForName("gpus").Description; !strings.Contains(got, "0-64") {
		t.Fatalf("size.gpus: %q", got)
	}
	for _, f := range d.Mutation.Fields {
		if strings.HasPrefix(f.Name, "__") {
			continue
		}
		if f.Description == "" || gqldoc.Methods(d)[f.Name] != "" {
			t.Errorf("mutation %s is not described: %q", f.Name, f.Description)
		}
		for _, a := range f.Arguments {
			for _, x := range d.Types[a.Type.Name()].Fields {
				if x.Description == "" {
					t.Errorf("%s.%s is not described", a.Type.Name(), x.Name)
				}
			}
		}
	}
	// Lists' connections and edges, mutations' payloads and inputs say
	// what they are.
	if got := d.Types["InstanceConnection"].Description; got != "A page of a list of `Instance`." {
		t.Fatalf("InstanceConnection: %q", got)
	}
	if got := d.Types["InstanceEdge"].Fields.ForName("cursor").Description; !strings.Contains(got, "`after`") {
		t.Fatalf("InstanceEdge.cursor: %q", got)
	}
	if got := d.Types["CreateInstancePayload"].Description; got != "What `createInstance` answers." {
		t.Fatalf("CreateInstancePayload: %q", got)
	}
	for name, def := range d.Types {
		for _, suffix := range []string{"Connection", "Edge", "Payload", "Input"} {
			if strings.HasSuffix(name, suffix) && def.Description == "" {
				t.Errorf("%s is not described", name)
			}
		}
	}
	// The parsed schema every server shares is unchanged.
	if s.Mutation.Fields.ForName("createInstance").Description != "instances.create" ||
		s.Types["CreateInstanceInput"].Fields.ForName("tenantId").Description != "" {
		t.Fatal("Describe changed the parsed schema")
	}
}

// An output field's words (a Go field's doc tag) are the graph's field of
// the same type and name, where the schema files give it none, and the
// OpenAPI document's: one text for both surfaces.
func TestOutputFieldsShareTheirWords(t *testing.T) {
	reg := app.Registry(nil, nil, nil, nil)
	want := reg.FieldDoc("Profile", "used")
	if !strings.HasPrefix(want, "True once a workflow has used this version") {
		t.Fatalf("Profile.used in the registry: %q", want)
	}
	if got := gqldoc.Describe(parsed(), reg).Types["Profile"].Fields.ForName("used").Description; got != want {
		t.Fatalf("Profile.used in the graph: %q", got)
	}
	if parsed().Types["Profile"].Fields.ForName("used").Description != "" {
		t.Fatal("the parsed schema itself changed")
	}
}

// The words of an output component reach its graph type under another
// name too (GraphNames: the method surface's Node is the graph's
// ComputeNode), but a Relay id stays the Relay id: a Snapshot's id is
// inv_…, an InventorySnapshot's id the global id node(id:) reads.
func TestOutputWordsUnderAnotherName(t *testing.T) {
	reg := app.Registry(nil, nil, nil, nil)
	s := gqldoc.Describe(parsed(), reg)
	if got, want := s.Types["ComputeNode"].Fields.ForName("nodeId").Description, reg.FieldDoc("Node", "nodeId"); got != want || want == "" {
		t.Errorf("ComputeNode.nodeId: %q, want Node.nodeId's %q", got, want)
	}
	if got := s.Types["InventorySnapshot"].Fields.ForName("id").Description; !strings.Contains(got, "global id") {
		t.Errorf("InventorySnapshot.id: %q", got)
	}
}
