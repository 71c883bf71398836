package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// benchCall runs one method per iteration and reports SQL statements per op.
func benchCall(b *testing.B, e *testkit.Env, token, method string, body map[string]any) {
	b.Helper()
	var statements int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := e.Call(token, method, body)
		if r.Status != 200 {
			b.Fatalf("%s: %d %s", method, r.Status, r.Raw)
		}
		statements += e.Statements(r)
	}
	b.ReportMetric(float64(statements)/float64(b.N), "statements/op")
}

func benchProfiles(b *testing.B) (*testkit.Env, string) {
	e := testkit.Start(b)
	admin, _, _ := e.Tenant("acme")
	for i := 0; i < 40; i++ {
		steps := []any{map[string]any{"name": "wipe", "use": "disk.wipe", "with": map[string]any{"devices": []any{"/dev/nvme0n1", "/dev/nvme1n1"}}},
			map[string]any{"use": "os.install"}, map[string]any{"use": "drivers.install"}}
		doc := map[string]any{"id": fmt.Sprintf("gpu-%02d", i), "version": 1, "name": "GPU node",
			"image":   map[string]any{"url": "https://images.example/noble.raw.zst", "sha256": strings.Repeat("b", 64), "format": "raw"},
			"drivers": []any{map[string]any{"name": "nvidia", "version": "570.86.15"}}, "steps": steps,
			"userData": "#cloud-config\npackages: [nvidia-container-toolkit]\n"}
		vis := "private"
		if i%4 == 0 {
			vis = "public"
		}
		if r := e.Call(admin, "profiles/create", map[string]any{"tenantId": "acme", "document": doc, "visibility": vis}); r.Status != 200 {
			b.Fatalf("profiles.create: %s", r.Raw)
		}
	}
	return e, admin
}

func BenchmarkProfilesGet(b *testing.B) {
	e, admin := benchProfiles(b)
	benchCall(b, e, admin, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-07"})
}

func BenchmarkProfilesList(b *testing.B) {
	e, admin := benchProfiles(b)
	benchCall(b, e, admin, "profiles/list", map[string]any{"tenantId": "acme", "limit": 50})
}

func BenchmarkProfilesRender(b *testing.B) {
	e, admin := benchProfiles(b)
	benchCall(b, e, admin, "profiles/render", map[string]any{"tenantId": "acme", "profileId": "gpu-07", "profileVersion": 1})
}

func BenchmarkProjectsGet(b *testing.B) {
	e := testkit.Start(b)
	admin, _, _ := e.Tenant("acme")
	p := e.Must(e.Call(admin, "projects/create", map[string]any{"tenantId": "acme", "name": "web"}))
	benchCall(b, e, admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": p.Str("projectId")})
}

func BenchmarkGraphQLTenantProjects(b *testing.B) {
	e := testkit.Start(b)
	admin, _, _ := e.Tenant("acme")
	for i := 0; i < 50; i++ {
		e.Must(e.Call(admin, "projects/create", map[string]any{"tenantId": "acme", "name": fmt.Sprintf("p%02d", i)}))
	}
	q := `{ tenant(tenantId: "acme") { projects(first: 50) { totalCount edges { node { id name members(first: 5) { totalCount } } } } } }`
	var statements int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := e.GraphQL(admin, q, nil)
		if r.Status != 200 || r.Body["errors"] != nil {
			b.Fatalf("%s", r.Raw)
		}
		statements += e.Statements(r)
	}
	b.ReportMetric(float64(statements)/float64(b.N), "statements/op")
}
