// Package docgen renders the registry's documents: docs/api/<group>.md in
// the shape of the seed pages (with the output fields, errors and an example
// recorded from the e2e suite), docs/api/README.md (the method index),
// docs/api/errors.md, docs/api/schemas.md, docs/api/openapi.json, and the
// printed GraphQL schema (schema.graphql at the repository root).
// `make generate` writes them; a test fails when the committed files are
// stale.
package docgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/formatter"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/gqldoc"
	"github.com/bettercompute/computed/internal/registry"
)

// ExamplesFile holds one recorded request and answer per method, written by
// `make examples` (testkit records them while the e2e suite runs).
const ExamplesFile = "docs/api/examples.json"

// Examples reads the recorded examples under the repository root.
func Examples(root string) (map[string]registry.Example, error) {
	b, err := os.ReadFile(filepath.Join(root, ExamplesFile))
	if err != nil {
		return nil, err
	}
	var ex map[string]registry.Example
	if err := json.Unmarshal(b, &ex); err != nil {
		return nil, fmt.Errorf("%s: %w", ExamplesFile, err)
	}
	return ex, nil
}

// Files returns every generated document by path relative to the
// repository root (root is where to read the examples from).
func Files(root string) (map[string][]byte, error) {
	examples, err := Examples(root)
	if err != nil {
		return nil, err
	}
	reg := app.Registry(nil, nil, nil, nil)
	out := map[string][]byte{}
	var idx strings.Builder
	idx.WriteString("# Method surface\n\nGenerated from the method registry by `make generate`; do not edit.\n\n")
	idx.WriteString("Every method is `POST /api/compute/{group}/{method}` with a JSON object body and a bearer token (`Authorization: Bearer …`; only `nodes.join` takes none). `GET /api/compute` serves this index as JSON, with each method's input and output schemas, and `GET /openapi.json` the OpenAPI 3.1 document ([openapi.json](openapi.json)). An optional field sent as `null` is the field left out: its default applies, and an update leaves what it names as it is (send `\"\"` to clear a text); the schemas say so (`[\"string\", \"null\"]`). An item of a list cannot be `null` (`INVALID_INPUT` at the item, as for a wrong type). A field the method does not know, a key given twice, and anything after the JSON object are `INVALID_INPUT`.\n\n")
	idx.WriteString("- [Errors](errors.md): the codes, their HTTP statuses and what a client should do.\n")
	idx.WriteString("- [Named schemas](schemas.md): profile documents, inventory sections and the closed sets of strings.\n")
	idx.WriteString("- [Handlers](handlers.md): the Go function that implements each method, with its input and output types.\n")
	idx.WriteString("- Each method page shows the input and output fields, the errors and a request and answer recorded from the e2e suite.\n\n")
	idx.WriteString("| Group | Methods |\n|---|---|\n")
	for _, g := range reg.Groups {
		out["docs/api/"+g.Name+".md"] = []byte(reg.Markdown(g, examples))
		var names []string
		for _, m := range reg.Methods() {
			if m.Group == g.Name {
				names = append(names, fmt.Sprintf("[%s](%s.md#%s)", m.Name, g.Name, strings.ToLower(m.Name)))
			}
		}
		fmt.Fprintf(&idx, "| [%s](%s.md) | %s |\n", g.Name, g.Name, strings.Join(names, ", "))
	}
	out["docs/api/README.md"] = []byte(idx.String())
	out["docs/api/errors.md"] = []byte(registry.ErrorsMarkdown())
	out["docs/api/schemas.md"] = []byte(reg.SchemasMarkdown())
	out["docs/api/handlers.md"] = []byte(reg.HandlersMarkdown())
	b, _ := json.MarshalIndent(reg.OpenAPI("0.2.0"), "", "  ")
	out["docs/api/openapi.json"] = append(b, '\n')
	out["schema.graphql"] = SDL(reg)
	return out, nil
}

// SDL prints the whole GraphQL schema the server executes (the schema/
// files as gqlgen parsed them, without the built-in types, the mutations
// described from reg as the server describes them): the artefact client
// code generators read without a running server.
func SDL(reg *registry.Registry) []byte {
	var b bytes.Buffer
	b.WriteString("# The GraphQL schema of the Better Compute API, printed from schema/*.graphqls\n# by `make generate` (internal/docgen); do not edit. Served at POST /graphql.\n\n")
	var sdl bytes.Buffer
	formatter.NewFormatter(&sdl, formatter.WithIndent("  ")).FormatSchema(served(gqldoc.Describe(graph.NewExecutableSchema(graph.Config{}).Schema(), reg)))
	// A blank line after each definition, for people reading it.
	for _, line := range strings.SplitAfter(sdl.String(), "\n") {
		b.WriteString(line)
		if line == "}\n" || strings.HasPrefix(line, "scalar ") || strings.HasPrefix(line, ") on ") {
			b.WriteString("\n")
		}
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}

// specified are the directives every GraphQL schema has (the spec's); the
// formatter leaves out every built-in directive, but the server also
// serves @defer (gqlgen's prelude), so the printed schema declares it.
var specified = map[string]bool{"skip": true, "include": true, "deprecated": true, "specifiedBy": true, "oneOf": true}

func served(s *ast.Schema) *ast.Schema {
	c := *s
	c.Directives = make(map[string]*ast.DirectiveDefinition, len(s.Directives))
	for name, d := range s.Directives {
		if d.Position != nil && d.Position.Src != nil && d.Position.Src.BuiltIn && !specified[name] {
			dd, pos, src := *d, *d.Position, *d.Position.Src
			src.BuiltIn = false
			pos.Src = &src
			dd.Position = &pos
			d = &dd
		}
		c.Directives[name] = d
	}
	return &c
}
