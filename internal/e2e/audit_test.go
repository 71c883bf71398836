package e2e

import (
	"database/sql"
	"errors"
	"net/http"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

type auditRow struct {
	Method      string         `db:"method"`
	Outcome     string         `db:"outcome"`
	Resource    string         `db:"resource"`
	RequestID   string         `db:"request_id"`
	PrincipalID sql.NullString `db:"principal_id"`
}

// TestAuditLog: every mutation attempt that reaches a decision leaves one
// audit row naming the method, the outcome and the response's X-Request-Id.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")
	web := newProject(t, e, acme.Member.Token, "acme", "web")
	cases := []struct {
		name, method, key string
		caller            actor
		in                map[string]any
		outcome, resource string // resource "" means the created project's
	}{
		{"created project", "projects/create", "projects.create", acme.Member,
			map[string]any{"tenantId": "acme", "name": "api"}, "ok", ""},
		{"denied create", "projects/create", "projects.create", acme.Viewer,
			map[string]any{"tenantId": "acme", "name": "nope"}, pd, "compute-tenant/acme"},
		{"duplicate create", "projects/create", "projects.create", acme.Member,
			map[string]any{"tenantId": "acme", "name": "web"}, cfl, "compute-tenant/acme"},
		{"updated project", "projects/update", "projects.update", acme.Member,
			map[string]any{"tenantId": "acme", "projectId": web, "description": "d"}, "ok", "compute-project/" + web},
		{"stale update", "projects/update", "projects.update", acme.Member,
			map[string]any{"tenantId": "acme", "projectId": web, "description": "d", "expectedVersion": 1}, cfl, "compute-project/" + web},
		{"other tenant's admin", "projects/delete", "projects.delete", evil.Admin,
			map[string]any{"tenantId": "acme", "projectId": web}, pd, "compute-project/" + web},
		{"other tenant's admin on its own tenant", "projects/delete", "projects.delete", evil.Admin,
			map[string]any{"tenantId": "evil", "projectId": web}, nf, "compute-project/" + web},
		{"denied token create", "tokens/create", "tokens.create", acme.Member,
			map[string]any{"tenantId": "acme", "name": "x", "role": "admin"}, pd, "compute-tenant/acme"},
		{"denied tenant create", "tenants/create", "tenants.create", acme.Admin,
			map[string]any{"tenantId": "mine", "name": "x"}, pd, "platform"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env(t, e).Call(c.caller.Token, c.method, c.in)
			want := c.outcome
			if want == "ok" {
				want = ""
			}
			expect(t, r, want, anyPath)
			reqID := r.Header.Get("X-Request-Id")
			var rows []auditRow
			if err := e.DB.SelectContext(t.Context(), &rows, `SELECT method, outcome, resource, request_id, principal_id FROM audit_log WHERE request_id = $1`, reqID); err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 {
				t.Fatalf("%d audit rows for request %s, want 1: %+v", len(rows), reqID, rows)
			}
			a := rows[0]
			resource := c.resource
			if resource == "" {
				resource = "compute-project/" + r.Str("projectId")
			}
			if a.Method != c.key || a.Outcome != c.outcome || a.RequestID != reqID || a.Resource != resource ||
				a.PrincipalID.String != c.caller.PrincipalID {
				t.Fatalf("audit row %+v, want method %s outcome %s resource %s principal %s", a, c.key, c.outcome, resource, c.caller.PrincipalID)
			}
		})
	}

	// a client-chosen request id is the one recorded (GetContext on one row)
	h := map[string]string{"Authorization": "Bearer " + acme.Member.Token, "X-Request-Id": "audit-test-0001"}
	r := rawCall(t, e, http.MethodPost, "/api/compute/projects/create", h, []byte(`{"tenantId":"acme","name":"traced"}`))
	expect(t, r, ok, "")
	var a auditRow
	if err := e.DB.GetContext(t.Context(), &a, `SELECT method, outcome, resource, request_id, principal_id FROM audit_log WHERE request_id = $1`, "audit-test-0001"); err != nil {
		t.Fatalf("audit row for a client request id: %v", err)
	}
	if a.Method != "projects.create" || a.Outcome != "ok" || a.Resource != "compute-project/"+r.Str("projectId") {
		t.Fatalf("audit row %+v", a)
	}

	// reads are not audited; a failed one neither
	rr := e.Call(acme.Viewer.Token, "projects/list", map[string]any{"tenantId": "acme"})
	must(t, rr)
	err := e.DB.GetContext(t.Context(), &a, `SELECT method, outcome, resource, request_id, principal_id FROM audit_log WHERE request_id = $1`, rr.Header.Get("X-Request-Id"))
	if !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("a read was audited: %+v %v", a, err)
	}
	// exactly the successful creates are audited as ok
	var n int
	if err := e.DB.GetContext(t.Context(), &n, `SELECT count(*) FROM audit_log WHERE method = 'projects.create' AND outcome = 'ok' AND resource LIKE 'compute-project/%'`); err != nil || n != 3 {
		t.Fatalf("%d ok project creates audited, want 3 (web, api, traced): %v", n, err)
	}
}

// TestAuditGraphQLMutation: mutations through GraphQL are audited the same way.
func TestAuditGraphQLMutation(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	q := `mutation($in: CreateProjectInput!) { createProject(input: $in) { project { projectId } } }`
	for _, c := range []struct {
		caller  actor
		outcome string
	}{{acme.Member, "ok"}, {acme.Viewer, pd}} {
		r := e.GraphQL(c.caller.Token, q, map[string]any{"in": map[string]any{"tenantId": "acme", "name": "g-" + c.outcome}})
		var a auditRow
		if err := e.DB.GetContext(t.Context(), &a, `SELECT method, outcome, resource, request_id, principal_id FROM audit_log WHERE request_id = $1`, r.Header.Get("X-Request-Id")); err != nil {
			t.Fatalf("graphql %s: no audit row: %v (%s)", c.outcome, err, r.Raw)
		}
		if a.Method != "projects.create" || a.Outcome != c.outcome || a.PrincipalID.String != c.caller.PrincipalID {
			t.Fatalf("graphql audit row %+v", a)
		}
	}
}
