// Package docgen renders the registry's documents: docs/api/<group>.md in
// the shape of the seed pages, docs/api/README.md (the method index) and
// docs/api/openapi.json. `make generate` writes them; a test fails when the
// committed files are stale.
package docgen

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bettercompute/computed/internal/app"
)

// Files returns every generated document by path relative to the repo root.
func Files() map[string][]byte {
	reg := app.Registry(nil, nil, nil, nil)
	out := map[string][]byte{}
	var idx strings.Builder
	idx.WriteString("# Method surface\n\nGenerated from the method registry by `make generate`; do not edit.\n\n")
	idx.WriteString("Every method is `POST /api/compute/{group}/{method}` with a JSON object body. `GET /api/compute` serves this index as JSON and `GET /openapi.json` the OpenAPI 3.1 document ([openapi.json](openapi.json)).\n\n")
	idx.WriteString("| Group | Methods |\n|---|---|\n")
	for _, g := range reg.Groups {
		out["docs/api/"+g.Name+".md"] = []byte(reg.Markdown(g))
		var names []string
		for _, m := range reg.Methods() {
			if m.Group == g.Name {
				names = append(names, fmt.Sprintf("[%s](%s.md#%s)", m.Name, g.Name, strings.ToLower(m.Name)))
			}
		}
		fmt.Fprintf(&idx, "| [%s](%s.md) | %s |\n", g.Name, g.Name, strings.Join(names, ", "))
	}
	out["docs/api/README.md"] = []byte(idx.String())
	b, _ := json.MarshalIndent(reg.OpenAPI("0.2.0"), "", "  ")
	out["docs/api/openapi.json"] = append(b, '\n')
	return out
}
