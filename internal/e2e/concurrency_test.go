package e2e

import (
	"fmt"
	"sync"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// TestConcurrentUpdateSameVersion: N concurrent projects.update calls with the
// same expectedVersion; exactly one wins, the rest are CONFLICT.
func TestConcurrentUpdateSameVersion(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	id := newProject(t, e, acme.Member.Token, "acme", "web")
	const n = 8
	res := make([]testkit.Resp, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			res[i] = e.Call(acme.Member.Token, "projects/update", map[string]any{
				"tenantId": "acme", "projectId": id, "description": fmt.Sprintf("writer %d", i), "expectedVersion": 1})
		}(i)
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, r := range res {
		switch r.Status {
		case 200:
			if winner >= 0 {
				t.Fatalf("two winners: %d and %d", winner, i)
			}
			winner = i
			if r.Body["rowVersion"] != float64(2) || r.Str("description") != fmt.Sprintf("writer %d", i) {
				t.Fatalf("winner output: %s", r.Raw)
			}
		default:
			expect(t, r, cfl, anyPath)
		}
	}
	if winner < 0 {
		t.Fatal("no update won")
	}
	g := must(t, e.Call(acme.Member.Token, "projects/get", map[string]any{"tenantId": "acme", "projectId": id}))
	if g.Body["rowVersion"] != float64(2) || g.Str("description") != fmt.Sprintf("writer %d", winner) {
		t.Fatalf("stored project: %s", g.Raw)
	}
}

// TestConcurrentCreateSameName: concurrent creates of one project name: one
// project, the others CONFLICT.
func TestConcurrentCreateSameName(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	const n = 6
	res := make([]testkit.Resp, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res[i] = e.Call(acme.Member.Token, "projects/create", map[string]any{"tenantId": "acme", "name": "same"})
		}(i)
	}
	wg.Wait()
	wins := 0
	for _, r := range res {
		if r.Status == 200 {
			wins++
			continue
		}
		expect(t, r, cfl, "name")
	}
	l := must(t, e.Call(acme.Member.Token, "projects/list", map[string]any{"tenantId": "acme"}))
	if wins != 1 || len(items(t, l)) != 1 {
		t.Fatalf("%d creates won, %d projects stored", wins, len(items(t, l)))
	}
}

// TestConflictsAndUpdateRules: stale versions, empty updates, duplicate names
// and tenants.
func TestConflictsAndUpdateRules(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	other := newTenant(t, e, "other")
	web := newProject(t, e, acme.Member.Token, "acme", "web")
	api := newProject(t, e, acme.Member.Token, "acme", "api")
	owner := acme.Member.Token
	up := func(in map[string]any) map[string]any {
		out := map[string]any{"tenantId": "acme", "projectId": web}
		for k, v := range in {
			out[k] = v
		}
		return out
	}
	steps := []struct {
		name, caller, method string
		in                   map[string]any
		code, path           string
		rowVersion           float64 // on success
	}{
		{"update to v2", owner, "projects/update", up(map[string]any{"name": "web2", "expectedVersion": 1}), ok, "", 2},
		{"stale expectedVersion", owner, "projects/update", up(map[string]any{"name": "web3", "expectedVersion": 1}), cfl, anyPath, 0},
		{"future expectedVersion", owner, "projects/update", up(map[string]any{"name": "web3", "expectedVersion": 9}), cfl, anyPath, 0},
		{"neither name nor description", owner, "projects/update", up(map[string]any{"expectedVersion": 2}), inv, "name", 0},
		{"both null", owner, "projects/update", up(map[string]any{"name": nil, "description": nil}), inv, "name", 0},
		{"description only, no version", owner, "projects/update", up(map[string]any{"description": "x"}), ok, "", 3},
		{"rename onto a taken name", owner, "projects/update", up(map[string]any{"name": "api"}), cfl, "name", 0},
		{"rename onto its own name", owner, "projects/update", up(map[string]any{"name": "web2", "expectedVersion": 3}), ok, "", 4},
		{"empty description allowed", owner, "projects/update", up(map[string]any{"description": ""}), ok, "", 5},
		{"duplicate project name", owner, "projects/create", map[string]any{"tenantId": "acme", "name": "api"}, cfl, "name", 0},
		{"same name in another tenant", other.Member.Token, "projects/create", map[string]any{"tenantId": "other", "name": "api"}, ok, "", 1},
		{"tenants.create first", e.Operator, "tenants/create", map[string]any{"tenantId": "dup", "name": "Dup"}, ok, "", -1},
		{"tenants.create twice", e.Operator, "tenants/create", map[string]any{"tenantId": "dup", "name": "Dup again"}, cfl, anyPath, 0},
		{"tenants.create existing acme", e.Operator, "tenants/create", map[string]any{"tenantId": "acme", "name": "x"}, cfl, anyPath, 0},
	}
	for _, s := range steps { // in order: each step builds on the last
		r := e.Call(s.caller, s.method, s.in)
		if r.Status != statusOf[s.code] || r.Code() != s.code {
			t.Fatalf("%s: want %q, got %d %s", s.name, s.code, r.Status, r.Raw)
		}
		expect(t, r, s.code, s.path)
		if s.code == ok && s.rowVersion > 0 && r.Body["rowVersion"] != s.rowVersion {
			t.Fatalf("%s: rowVersion %v, want %v: %s", s.name, r.Body["rowVersion"], s.rowVersion, r.Raw)
		}
	}
	// the conflict names the current version
	r := e.Call(owner, "projects/update", up(map[string]any{"name": "late", "expectedVersion": 1}))
	expect(t, r, cfl, anyPath)
	if d := obj(t, r.Body, "error", "details"); d["rowVersion"] != float64(5) {
		t.Fatalf("conflict details: %s", r.Raw)
	}
	g := must(t, e.Call(owner, "projects/get", map[string]any{"tenantId": "acme", "projectId": web}))
	if g.Str("name") != "web2" || g.Str("description") != "" || g.Body["rowVersion"] != float64(5) {
		t.Fatalf("final project: %s", g.Raw)
	}
	// the original tenant survived the duplicate create
	tn := must(t, e.Call(e.Operator, "tenants/get", map[string]any{"tenantId": "dup"}))
	if tn.Str("name") != "Dup" {
		t.Fatalf("tenant overwritten by a conflicting create: %s", tn.Raw)
	}
	_ = api
}
