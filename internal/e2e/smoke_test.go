package e2e

import (
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// The "done when" sequence: a tenant, an admin and a member token, a
// project, read back through the method surface and through GraphQL.
func TestDoneWhenSequence(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	_ = admin
	p := e.Must(e.Call(member, "projects/create", map[string]any{"tenantId": "acme", "name": "web", "description": "the web team"}))
	id := p.Str("projectId")
	got := e.Must(e.Call(member, "projects/get", map[string]any{"tenantId": "acme", "projectId": id}))
	if got.Str("name") != "web" || got.Body["rowVersion"].(float64) != 1 {
		t.Fatalf("projects.get: %s", got.Raw)
	}
	g := e.GraphQL(admin, `query($t: String!) { tenant(tenantId: $t) { projects(first: 10) { totalCount edges { node { id projectId name } } } } }`,
		map[string]any{"t": "acme"})
	if g.Status != 200 {
		t.Fatalf("graphql: %d %s", g.Status, g.Raw)
	}
	conn := g.Body["data"].(map[string]any)["tenant"].(map[string]any)["projects"].(map[string]any)
	edges := conn["edges"].([]any)
	if conn["totalCount"].(float64) != 1 || len(edges) != 1 || edges[0].(map[string]any)["node"].(map[string]any)["projectId"] != id {
		t.Fatalf("graphql projects: %s", g.Raw)
	}
}
