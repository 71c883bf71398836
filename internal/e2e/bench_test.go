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

// BenchmarkGraphQLFleet is the dashboard's fleet query over 50 pools of 40
// nodes, each with a realistic 8-GPU inventory.
func BenchmarkGraphQLFleet(b *testing.B) {
	e := testkit.Start(b)
	admin, _, _ := e.Tenant("acme")
	seedFleet(b, e, admin, "acme", 50, 40)
	var statements int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := e.GraphQL(admin, fleetQuery, map[string]any{"t": "acme"})
		if r.Status != 200 || r.Body["errors"] != nil {
			b.Fatalf("%.1000s", r.Raw)
		}
		statements += e.Statements(r)
	}
	b.ReportMetric(float64(statements)/float64(b.N), "statements/op")
}

// benchNode joins one node that reported the H100 inventory twice (the
// second time with another driver and one GPU fewer).
func benchNode(b *testing.B) (e *testkit.Env, admin, nodeID, cred string) {
	e = testkit.Start(b)
	admin, _, _ = e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred = e.Node(admin, "acme", pool)
	rep := machineReport(b, 1)
	e.Must(e.Call(cred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": rep}))
	rep["drivers"].(map[string]any)["nvidia"] = "570.124.06"
	rep["gpus"] = rep["gpus"].([]any)[:7]
	e.Must(e.Call(cred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": rep}))
	return e, admin, nodeID, cred
}

func BenchmarkInventoryGet(b *testing.B) {
	e, admin, nodeID, _ := benchNode(b)
	benchCall(b, e, admin, "inventory/get", map[string]any{"tenantId": "acme", "nodeId": nodeID})
}

func BenchmarkInventoryDiff(b *testing.B) {
	e, admin, nodeID, _ := benchNode(b)
	benchCall(b, e, admin, "inventory/diff", map[string]any{"tenantId": "acme", "nodeId": nodeID})
}

// BenchmarkInventoryReport alternates two reports, so every call stores a
// snapshot (the expensive path: decode, canonicalize, hash, insert).
func BenchmarkInventoryReport(b *testing.B) {
	e, _, nodeID, cred := benchNode(b)
	a, c := machineReport(b, 1), machineReport(b, 1)
	c["drivers"].(map[string]any)["nvidia"] = "570.124.06"
	bodies := []map[string]any{{"nodeId": nodeID, "sections": a}, {"nodeId": nodeID, "sections": c}}
	var statements int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := e.Call(cred, "inventory/report", bodies[i%2])
		if r.Status != 200 || r.Body["stored"] != true {
			b.Fatalf("%s", r.Raw)
		}
		statements += e.Statements(r)
	}
	b.ReportMetric(float64(statements)/float64(b.N), "statements/op")
}

// BenchmarkInventoryReportUnchanged is the common case: the daemon's
// periodic report equals the latest and stores nothing.
func BenchmarkInventoryReportUnchanged(b *testing.B) {
	e, _, nodeID, cred := benchNode(b)
	rep := machineReport(b, 1)
	rep["drivers"].(map[string]any)["nvidia"] = "570.124.06"
	rep["gpus"] = rep["gpus"].([]any)[:7]
	benchCall(b, e, cred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": rep})
}
