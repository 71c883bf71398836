package docgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/internal/apicheck"
	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/gqldoc"
	"github.com/bettercompute/computed/internal/registry"
)

const root = "../.."

// TestGeneratedDocsAreCurrent fails when docs/api differs from the registry.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%s: %v (run make generate)", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make generate", path)
		}
	}
}

// TestExamplesCoverEveryMethod fails when a method has no recorded example
// or its recorded request or answer no longer fits the OpenAPI document
// (run make examples after changing a method's input or output).
func TestExamplesCoverEveryMethod(t *testing.T) {
	examples, err := Examples(root)
	if err != nil {
		t.Fatal(err)
	}
	reg := app.Registry(nil, nil, nil, nil)
	raw, _ := json.Marshal(reg.OpenAPI("test"))
	doc, err := apicheck.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range reg.Methods() {
		ex, ok := examples[m.Key()]
		if !ok {
			t.Errorf("%s has no recorded example: exercise it in the e2e suite and run make examples", m.Key())
			continue
		}
		if err := doc.Input(m.Path(), ex.Request); err != nil {
			t.Errorf("%s: the recorded request no longer fits the input schema (run make examples): %v", m.Key(), err)
		}
		if err := doc.Answer(m.Path(), 200, ex.Answer); err != nil {
			t.Errorf("%s: the recorded answer no longer fits the output schema (run make examples): %v", m.Key(), err)
		}
	}
	for k := range examples {
		g, name, _ := strings.Cut(k, ".")
		if _, ok := reg.Lookup(g, name); !ok {
			t.Errorf("example %s names no method (run make examples)", k)
		}
	}
}

// TestGraphQLEnumsAreTheRegistrys: every enum of the graph is a closed set
// the registry names (the OpenAPI document's enum of the same name), with
// the same values spelled the GraphQL way, so the two surfaces cannot
// disagree on a set.
func TestGraphQLEnumsAreTheRegistrys(t *testing.T) {
	app.Registry(nil, nil, nil, nil) // the packages define their enums
	spell := strings.NewReplacer("-", "_", ".", "_")
	n := 0
	for name, def := range graph.NewExecutableSchema(graph.Config{}).Schema().Types {
		if def.Kind != ast.Enum || def.BuiltIn || strings.HasPrefix(name, "__") {
			continue
		}
		n++
		var want []string
		func() {
			defer func() {
				if recover() != nil {
					t.Errorf("GraphQL enum %s is no enum of the registry (registry.DefineEnum)", name)
				}
			}()
			for _, v := range registry.Enum(name) {
				// camelCase splits at its humps: joinRequest is JOIN_REQUEST.
				v = regexp.MustCompile(`([a-z])([A-Z])`).ReplaceAllString(v, "${1}_$2")
				want = append(want, spell.Replace(strings.ToUpper(v)))
			}
		}()
		var got []string
		for _, v := range def.EnumValues {
			got = append(got, v.Name)
		}
		if want != nil && strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("GraphQL enum %s is %v, the registry's is %v", name, got, want)
		}
	}
	if n < 7 {
		t.Errorf("only %d enums in the graph", n)
	}
}

// TestOpenAPIObjectsSayWhatTheyHold: every object schema of the OpenAPI
// document names its properties or states additionalProperties. A bare
// {"type": "object"} is read by openapi-typescript as Record<string,
// never>, so a typed client could not send the README's own pools.create
// policy.
func TestOpenAPIObjectsSayWhatTheyHold(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(files["docs/api/openapi.json"], &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any, path string)
	n := 0
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			isObject := x["type"] == "object"
			if ts, ok := x["type"].([]any); ok {
				for _, t := range ts {
					isObject = isObject || t == "object"
				}
			}
			if isObject {
				n++
				_, props := x["properties"]
				_, addl := x["additionalProperties"]
				if !props && !addl {
					t.Errorf("%s: an object schema with neither properties nor additionalProperties", path)
				}
			}
			for k, c := range x {
				walk(c, path+"/"+k)
			}
		case []any:
			for i, c := range x {
				walk(c, fmt.Sprintf("%s/%d", path, i))
			}
		}
	}
	walk(doc, "")
	if n < 50 {
		t.Fatalf("only %d object schemas in the document", n)
	}
}

// TestGraphObjectsHoldTheMethodsFields: a graph type that stands for an
// object of the method surface (the OpenAPI component of the same name,
// or the one graphNames maps) has a field for every property of it, so
// what a method answers can be read from the graph too (ComputeNode had
// no latestSnapshotId, which nodes.get answers).
func TestGraphObjectsHoldTheMethodsFields(t *testing.T) {
	graphNames := gqldoc.GraphNames
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct{ Schemas map[string]map[string]any }
	}
	if err := json.Unmarshal(files["docs/api/openapi.json"], &doc); err != nil {
		t.Fatal(err)
	}
	types := graph.NewExecutableSchema(graph.Config{}).Schema().Types
	for from, to := range graphNames {
		if doc.Components.Schemas[from] == nil || types[to] == nil {
			t.Errorf("graphNames maps %s to %s: one of them is gone", from, to)
		}
	}
	pairs := 0
	for name, s := range doc.Components.Schemas {
		props, _ := s["properties"].(map[string]any)
		gname := name
		if g, ok := graphNames[name]; ok {
			gname = g
		}
		def := types[gname]
		if props == nil || def == nil || def.Kind != ast.Object {
			continue
		}
		pairs++
		for p := range props {
			if def.Fields.ForName(p) == nil {
				t.Errorf("the graph's %s has no field %s, which the method surface's %s has", gname, p, name)
			}
		}
	}
	if pairs < 25 {
		t.Errorf("only %d objects of the method surface have a graph type", pairs)
	}
}

// Every schema the named schemas refer to has its own section on
// schemas.md: InventorySections referred to CPU, GPU, Disk, NIC, Memory,
// OS and System, which only openapi.json held (a reader following the
// inventory guide found no page saying memory is totalBytes).
func TestSchemasPageDefinesWhatItRefersTo(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	page := string(files["docs/api/schemas.md"])
	for _, m := range regexp.MustCompile(`"#/components/schemas/([A-Za-z0-9_.-]+)"`).FindAllStringSubmatch(page, -1) {
		if !strings.Contains(page, "\n## "+m[1]+"\n") {
			t.Errorf("schemas.md refers to %s and has no section for it", m[1])
		}
	}
}

// TestMethodPagesStateTheirBodyLimit: every method's page and operation
// says how large its body may be, from the one limit the surface enforces
// (nodes.join's 64 KiB was stated nowhere, where errors.md says a
// method's page gives any limit other than 1 MiB).
func TestMethodPagesStateTheirBodyLimit(t *testing.T) {
	reg := app.Registry(nil, nil, nil, nil)
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	api := reg.OpenAPI("test")
	paths := api["paths"].(map[string]any)
	for _, m := range reg.Methods() {
		n := m.BodyLimit()
		want := fmt.Sprintf("%d MiB", n>>20)
		if n%(1<<20) != 0 {
			want = fmt.Sprintf("%d KiB", n>>10)
		}
		page := string(files["docs/api/"+m.Group+".md"])
		section := page[strings.Index(page, "\n## "+m.Name+"\n"):]
		if i := strings.Index(section[1:], "\n## "); i >= 0 {
			section = section[:i+1]
		}
		if !strings.Contains(section, "- Body: at most "+want+" of JSON") {
			t.Errorf("%s's page does not say its body limit, %s", m.Key(), want)
		}
		op := paths[m.Path()].(map[string]any)["post"].(map[string]any)
		if !strings.Contains(op["description"].(string), "Body: at most "+want+".") {
			t.Errorf("%s's operation does not say its body limit, %s", m.Key(), want)
		}
	}
	if m, _ := reg.Lookup("nodes", "join"); m.BodyLimit() != 64<<10 {
		t.Errorf("nodes.join's limit is %d", m.BodyLimit())
	}
}
