package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/instances/runner"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// auditRecord is an audit.list item.
type auditRecord struct {
	AuditID   string `json:"auditId"`
	TenantID  string `json:"tenantId"`
	Principal struct {
		PrincipalID *string `json:"principalId"`
		Kind, Name  string
		TenantID    *string `json:"tenantId"`
	} `json:"principal"`
	Method   string `json:"method"`
	Resource struct {
		Type, ID string
	} `json:"resource"`
	Outcome       string          `json:"outcome"`
	RequestID     string          `json:"requestId"`
	ClientAddress *string         `json:"clientAddress"`
	OccurredAt    time.Time       `json:"occurredAt"`
	Detail        json.RawMessage `json:"detail"`
}

func (r auditRecord) principal() string {
	if r.Principal.PrincipalID == nil {
		return ""
	}
	return *r.Principal.PrincipalID
}

// auditList calls audit.list and decodes its page.
func auditList(t testing.TB, e *testkit.Env, token string, in map[string]any) ([]auditRecord, *string) {
	t.Helper()
	r := must(t, env(t, e).Call(token, "audit/list", in))
	var p struct {
		Items  []auditRecord
		Cursor *string
	}
	if err := json.Unmarshal(r.Raw, &p); err != nil {
		t.Fatalf("audit.list: %v: %s", err, r.Raw)
	}
	return p.Items, p.Cursor
}

// recordOf is the one record of a request id in the tenant's trail, read
// by the operator through audit.list.
func recordOf(t testing.TB, e *testkit.Env, tenantID, requestID string) auditRecord {
	t.Helper()
	var found []auditRecord
	in := map[string]any{"tenantId": tenantID, "limit": 200}
	for {
		items, cur := auditList(t, e, e.Operator, in)
		for _, r := range items {
			if r.RequestID == requestID {
				found = append(found, r)
			}
		}
		if cur == nil {
			break
		}
		in["cursor"] = *cur
	}
	if len(found) != 1 {
		t.Fatalf("%d records of request %s in %s's trail, want 1: %+v", len(found), requestID, tenantID, found)
	}
	return found[0]
}

// TestAuditLog: every mutation attempt that reaches a decision leaves one
// record, readable through audit.list under the tenant the call named: the
// method, the outcome, the principal as it was, the resource, the
// response's X-Request-Id and the client address. A call naming a tenant
// its caller holds no role on is recorded under that tenant (its admins see
// the probe); one naming a tenant that does not exist is the platform's.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")
	web := newProject(t, e, acme.Member.Token, "acme", "web")
	pool := newPool(t, e, acme.Admin.Token, "acme", "gpu")
	jt := must(t, e.Call(acme.Admin.Token, "joinTokens/create", map[string]any{"tenantId": "acme", "poolId": pool["poolId"], "maxUses": 1})).Body["joinToken"].(map[string]any)["joinTokenId"].(string)
	cases := []struct {
		name, method, key string
		caller            actor
		in                map[string]any
		outcome, tenant   string
		resource          string // type/id; "" means the created project's
	}{
		{"created project", "projects/create", "projects.create", acme.Member,
			map[string]any{"tenantId": "acme", "name": "api"}, audit.Success, "acme", ""},
		{"denied create", "projects/create", "projects.create", acme.Viewer,
			map[string]any{"tenantId": "acme", "name": "nope"}, pd, "acme", "compute-tenant/acme"},
		{"duplicate create", "projects/create", "projects.create", acme.Member,
			map[string]any{"tenantId": "acme", "name": "web"}, cfl, "acme", "compute-tenant/acme"},
		{"updated project", "projects/update", "projects.update", acme.Member,
			map[string]any{"tenantId": "acme", "projectId": web, "description": "d"}, audit.Success, "acme", "compute-project/" + web},
		{"stale update", "projects/update", "projects.update", acme.Member,
			map[string]any{"tenantId": "acme", "projectId": web, "description": "d", "expectedVersion": 1}, cfl, "acme", "compute-project/" + web},
		{"other tenant's admin naming acme", "projects/delete", "projects.delete", evil.Admin,
			map[string]any{"tenantId": "acme", "projectId": web}, pd, "acme", "compute-project/" + web},
		{"other tenant's admin naming its own tenant", "projects/delete", "projects.delete", evil.Admin,
			map[string]any{"tenantId": "evil", "projectId": web}, nf, "evil", "compute-project/" + web},
		// Another tenant's id named in the caller's own tenant is the
		// NOT_FOUND of a made-up id, and so is its record, which the
		// caller's admins read: it named acme's pool (the join token's,
		// found by its id alone), where a made-up id's named none.
		{"other tenant's join token named in its own tenant", "joinTokens/revoke", "joinTokens.revoke", evil.Admin,
			map[string]any{"tenantId": "evil", "joinTokenId": jt}, nf, "evil", "compute-pool/"},
		// A member's refusal on its own tenant's join token names the
		// pool, as the answer does: the pool's trail shows it (it named a
		// pool of no id).
		{"own tenant's join token, denied", "joinTokens/revoke", "joinTokens.revoke", acme.Member,
			map[string]any{"tenantId": "acme", "joinTokenId": jt}, pd, "acme", "compute-pool/" + pool["poolId"].(string)},
		{"other tenant's admin naming acme's join token in acme", "joinTokens/revoke", "joinTokens.revoke", evil.Admin,
			map[string]any{"tenantId": "acme", "joinTokenId": jt}, pd, "acme", "compute-pool/"},
		{"a made-up join token", "joinTokens/revoke", "joinTokens.revoke", evil.Admin,
			map[string]any{"tenantId": "evil", "joinTokenId": "jtok_01m97e82d9r2fh0xtkw2s7bbbb"}, nf, "evil", "compute-pool/"},
		{"denied token create", "tokens/create", "tokens.create", acme.Member,
			map[string]any{"tenantId": "acme", "name": "x", "role": "admin"}, pd, "acme", "compute-tenant/acme"},
		{"a tenant that does not exist", "projects/create", "projects.create", acme.Admin,
			map[string]any{"tenantId": "ghost", "name": "x"}, pd, audit.PlatformTenant, "compute-tenant/ghost"},
		{"denied tenant create", "tenants/create", "tenants.create", acme.Admin,
			map[string]any{"tenantId": "mine", "name": "x"}, pd, audit.PlatformTenant, "compute-tenant/mine"},
		{"denied tenant create naming acme", "tenants/create", "tenants.create", evil.Admin,
			map[string]any{"tenantId": "acme", "name": "x"}, pd, "acme", "compute-tenant/acme"},
		{"a domain rule after the decision", "projects/create", "projects.create", acme.Member,
			map[string]any{"tenantId": "acme", "name": strings.Repeat("x", 200) + "y"}, inv, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env(t, e).Call(c.caller.Token, c.method, c.in)
			want := c.outcome
			if want == audit.Success {
				want = ""
			}
			expect(t, r, want, anyPath)
			if c.outcome == inv {
				// Input the schema refuses reaches no decision: no record.
				var n int
				if err := e.DB.GetContext(t.Context(), &n, `SELECT count(*) FROM audit_log WHERE request_id = $1`, r.Header.Get("X-Request-Id")); err != nil || n != 0 {
					t.Fatalf("%d records of a call refused by the schema: %v", n, err)
				}
				return
			}
			reqID := r.Header.Get("X-Request-Id")
			a := recordOf(t, e, c.tenant, reqID)
			resource := c.resource
			if resource == "" {
				resource = "compute-project/" + r.Str("projectId")
			}
			// the principal's home tenant: evil's in acme's trail when
			// evil's admin called on acme (its name is free text)
			home := "acme"
			if c.caller.PrincipalID == evil.Admin.PrincipalID {
				home = "evil"
			}
			if a.Principal.TenantID == nil || *a.Principal.TenantID != home {
				t.Fatalf("record %+v: the principal's tenant is not %s", a, home)
			}
			if a.Method != c.key || a.Outcome != c.outcome || a.TenantID != c.tenant || a.Resource.Type+"/"+a.Resource.ID != resource ||
				a.principal() != c.caller.PrincipalID || a.Principal.Kind != "service" || a.Principal.Name == "" ||
				a.ClientAddress == nil || *a.ClientAddress != "127.0.0.1" || a.OccurredAt.IsZero() || !strings.HasPrefix(a.AuditID, "aud_") {
				t.Fatalf("record %+v, want method %s outcome %s tenant %s resource %s principal %s", a, c.key, c.outcome, c.tenant, resource, c.caller.PrincipalID)
			}
		})
	}

	// tenants.create is the created tenant's record, by the operator.
	r := must(t, e.Call(e.Operator, "tenants/create", map[string]any{"tenantId": "made", "name": "Made"}))
	if a := recordOf(t, e, "made", r.Header.Get("X-Request-Id")); a.Principal.Kind != "operator" || a.Principal.TenantID != nil || a.Resource.Type != "compute-tenant" || a.Resource.ID != "made" {
		t.Fatalf("tenants.create record %+v", a)
	}

	// a client-chosen request id is the one recorded
	h := map[string]string{"Authorization": "Bearer " + acme.Member.Token, "X-Request-Id": "audit-test-0001"}
	r = rawCall(t, e, http.MethodPost, "/api/compute/projects/create", h, []byte(`{"tenantId":"acme","name":"traced"}`))
	expect(t, r, ok, "")
	if a := recordOf(t, e, "acme", "audit-test-0001"); a.Method != "projects.create" || a.Outcome != audit.Success {
		t.Fatalf("record %+v", a)
	}

	// reads are not audited
	rr := must(t, e.Call(acme.Viewer.Token, "projects/list", map[string]any{"tenantId": "acme"}))
	var n int
	if err := e.DB.GetContext(t.Context(), &n, `SELECT count(*) FROM audit_log WHERE request_id = $1`, rr.Header.Get("X-Request-Id")); err != nil || n != 0 {
		t.Fatalf("a read was audited: %d %v", n, err)
	}
	// exactly the successful creates are recorded as success
	items, _ := auditList(t, e, acme.Admin.Token, map[string]any{"tenantId": "acme", "method": "projects.create", "limit": 200})
	var created int
	for _, a := range items {
		if a.Outcome == audit.Success && a.Resource.Type == "compute-project" {
			created++
		}
	}
	if created != 3 {
		t.Fatalf("%d successful project creates recorded, want 3 (web, api, traced): %+v", created, items)
	}
}

// TestAuditGraphQLMutation: mutations through GraphQL are recorded the same way.
func TestAuditGraphQLMutation(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	q := `mutation($in: CreateProjectInput!) { createProject(input: $in) { project { projectId } } }`
	for _, c := range []struct {
		caller  actor
		outcome string
	}{{acme.Member, audit.Success}, {acme.Viewer, pd}} {
		r := e.GraphQL(c.caller.Token, q, map[string]any{"in": map[string]any{"tenantId": "acme", "name": "g-" + strings.ToLower(c.outcome)}})
		a := recordOf(t, e, "acme", r.Header.Get("X-Request-Id"))
		if a.Method != "projects.create" || a.Outcome != c.outcome || a.principal() != c.caller.PrincipalID {
			t.Fatalf("graphql record %+v", a)
		}
	}
}

// TestAuditListPermissions: audit.list is compute:audit:read on the
// tenant: admins hold it, members, viewers and node credentials do not, an
// admin of another tenant does not, and the operator reads every tenant's
// and the platform's.
func TestAuditListPermissions(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")
	pool := e.Pool(acme.Admin.Token, "acme", "bm")
	node, cred := e.Node(acme.Admin.Token, "acme", pool)
	_ = node
	for _, c := range []struct {
		name, token, tenant, code string
	}{
		{"admin", acme.Admin.Token, "acme", ""},
		{"member", acme.Member.Token, "acme", pd},
		{"viewer", acme.Viewer.Token, "acme", pd},
		{"node credential", cred, "acme", pd},
		{"another tenant's admin", evil.Admin.Token, "acme", pd},
		{"admin on a tenant that does not exist", acme.Admin.Token, "ghost", pd},
		{"admin on the platform", acme.Admin.Token, audit.PlatformTenant, pd},
		{"operator", e.Operator, "acme", ""},
		{"operator on another tenant", e.Operator, "evil", ""},
		{"operator on the platform", e.Operator, audit.PlatformTenant, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			expect(t, env(t, e).Call(c.token, "audit/list", map[string]any{"tenantId": c.tenant}), c.code, anyPath)
		})
	}
	// the admin reads acme's records only: evil's tokens were created by
	// the operator under evil.
	items, _ := auditList(t, e, acme.Admin.Token, map[string]any{"tenantId": "acme", "limit": 200})
	for _, a := range items {
		if a.TenantID != "acme" {
			t.Fatalf("acme's trail holds %+v", a)
		}
	}
	if len(items) < 5 {
		t.Fatalf("acme's trail: %+v", items)
	}
	// Another tenant's ids as filters find nothing of it: its project, its
	// admin.
	evilPrj := newProject(t, e, evil.Admin.Token, "evil", "secret")
	for _, f := range []map[string]any{{"resourceId": evilPrj}, {"principalId": evil.Admin.PrincipalID}, {"resourceId": "evil"}} {
		f["tenantId"] = "acme"
		if got, _ := auditList(t, e, acme.Admin.Token, f); len(got) != 0 {
			t.Fatalf("acme's trail filtered by %v holds %+v", f, got)
		}
	}
	if got, _ := auditList(t, e, evil.Admin.Token, map[string]any{"tenantId": "evil", "resourceId": evilPrj}); len(got) != 1 {
		t.Fatalf("evil's own project records: %+v", got)
	}
	// nodes.join names its join token and the pool's tenant.
	joins, _ := auditList(t, e, acme.Admin.Token, map[string]any{"tenantId": "acme", "method": "nodes.join"})
	if len(joins) != 1 || joins[0].Principal.Kind != audit.KindJoinToken || !strings.HasPrefix(joins[0].principal(), "jtok_") ||
		joins[0].Resource.Type != "compute-node" || joins[0].Resource.ID != node || joins[0].Outcome != audit.Success {
		t.Fatalf("nodes.join records %+v", joins)
	}
	// a join with an unknown token is the platform's
	r := e.Call("", "nodes/join", testkit.NewMachine(t).JoinBody("jt_not-a-token-at-all-0000000000"))
	expect(t, r, "UNAUTHENTICATED", anyPath)
	if a := recordOf(t, e, audit.PlatformTenant, r.Header.Get("X-Request-Id")); a.Principal.Kind != audit.KindJoinToken || a.Principal.PrincipalID != nil {
		t.Fatalf("unknown join token record %+v", a)
	}
}

// TestAuditListFilters: the filters and the pages' edges: since inclusive,
// until exclusive, until after since, resourceId, principalId, method, a
// cursor that walks every record once newest first, a forged cursor and
// the limit's bounds.
func TestAuditListFilters(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	var prjs []string
	for i := 0; i < 5; i++ {
		prjs = append(prjs, newProject(t, e, acme.Member.Token, "acme", fmt.Sprintf("p%d", i)))
	}
	must(t, e.Call(acme.Member.Token, "projects/update", map[string]any{"tenantId": "acme", "projectId": prjs[2], "description": "x"}))
	all, _ := auditList(t, e, acme.Admin.Token, map[string]any{"tenantId": "acme", "limit": 200})
	for i := 1; i < len(all); i++ {
		if all[i].OccurredAt.After(all[i-1].OccurredAt) {
			t.Fatalf("not newest first at %d: %+v", i, all)
		}
	}
	// pages of 2 walk every record once, in the same order
	var walked []string
	in := map[string]any{"tenantId": "acme", "limit": 2}
	for {
		items, cur := auditList(t, e, acme.Admin.Token, in)
		for _, a := range items {
			walked = append(walked, a.AuditID)
		}
		if cur == nil {
			break
		}
		in["cursor"] = *cur
	}
	if len(walked) != len(all) {
		t.Fatalf("pages walked %d records, one page holds %d", len(walked), len(all))
	}
	for i := range all {
		if walked[i] != all[i].AuditID {
			t.Fatalf("page walk differs at %d", i)
		}
	}
	// filters
	for _, c := range []struct {
		name string
		in   map[string]any
		keep func(a auditRecord) bool
	}{
		{"resourceId", map[string]any{"resourceId": prjs[2]}, func(a auditRecord) bool { return a.Resource.ID == prjs[2] }},
		{"principalId", map[string]any{"principalId": acme.Member.PrincipalID}, func(a auditRecord) bool { return a.principal() == acme.Member.PrincipalID }},
		{"method", map[string]any{"method": "projects.update"}, func(a auditRecord) bool { return a.Method == "projects.update" }},
		{"since is inclusive", map[string]any{"since": all[3].OccurredAt.Format(time.RFC3339Nano)},
			func(a auditRecord) bool { return !a.OccurredAt.Before(all[3].OccurredAt) }},
		{"until is exclusive", map[string]any{"until": all[3].OccurredAt.Format(time.RFC3339Nano)},
			func(a auditRecord) bool { return a.OccurredAt.Before(all[3].OccurredAt) }},
		// Bounds finer than the records' microseconds keep what they say
		// (they were cut to the microsecond: the record just
		// before since was kept, the one just before until was not).
		{"since a fraction after a record", map[string]any{"since": all[3].OccurredAt.Add(100 * time.Nanosecond).Format(time.RFC3339Nano)},
			func(a auditRecord) bool { return !a.OccurredAt.Before(all[3].OccurredAt.Add(100 * time.Nanosecond)) }},
		{"until a fraction after a record", map[string]any{"until": all[3].OccurredAt.Add(100 * time.Nanosecond).Format(time.RFC3339Nano)},
			func(a auditRecord) bool { return a.OccurredAt.Before(all[3].OccurredAt.Add(100 * time.Nanosecond)) }},
		{"a window", map[string]any{"since": all[4].OccurredAt.Format(time.RFC3339Nano), "until": all[1].OccurredAt.Format(time.RFC3339Nano)},
			func(a auditRecord) bool {
				return !a.OccurredAt.Before(all[4].OccurredAt) && a.OccurredAt.Before(all[1].OccurredAt)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := map[string]any{"tenantId": "acme", "limit": 200}
			for k, v := range c.in {
				in[k] = v
			}
			got, _ := auditList(t, e, acme.Admin.Token, in)
			var want []string
			for _, a := range all {
				if c.keep(a) {
					want = append(want, a.AuditID)
				}
			}
			var ids []string
			for _, a := range got {
				ids = append(ids, a.AuditID)
			}
			if len(want) == 0 || strings.Join(ids, ",") != strings.Join(want, ",") {
				t.Fatalf("got %v, want %v", ids, want)
			}
		})
	}
	// refusals
	now := time.Now().UTC().Format(time.RFC3339)
	for _, c := range []struct {
		in   map[string]any
		path string
	}{
		{map[string]any{"since": now, "until": now}, "until"},
		{map[string]any{"since": "yesterday"}, "since"},
		{map[string]any{"since": "0000-01-01T00:00:00Z"}, "since"},
		{map[string]any{"until": "0000-06-01T00:00:00+01:00"}, "until"},
		{map[string]any{"cursor": "bm90LWEtY3Vyc29y"}, "cursor"},
		{map[string]any{"limit": 0}, "limit"},
		{map[string]any{"limit": 201}, "limit"},
		{map[string]any{"method": "DROP TABLE"}, "method"},
	} {
		in := map[string]any{"tenantId": "acme"}
		for k, v := range c.in {
			in[k] = v
		}
		expect(t, e.Call(acme.Admin.Token, "audit/list", in), inv, c.path)
	}
}

// TestAuditAppendOnly: the records cannot be changed from a plain SQL
// session (the database's own trigger refuses UPDATE, DELETE and TRUNCATE);
// only audit_prune deletes, and only records older than its cutoff.
func TestAuditAppendOnly(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	newTenant(t, e, "acme")
	ctx := t.Context()
	var before int
	if err := e.DB.GetContext(ctx, &before, `SELECT count(*) FROM audit_log`); err != nil || before < 4 {
		t.Fatalf("%d records: %v", before, err)
	}
	for _, stmt := range []string{
		`UPDATE audit_log SET outcome = 'success'`,
		`UPDATE audit_log SET principal_name = 'someone else' WHERE tenant_id = 'acme'`,
		`DELETE FROM audit_log`,
		`DELETE FROM audit_log WHERE tenant_id = 'acme'`,
		`TRUNCATE audit_log`,
	} {
		if _, err := e.DB.ExecContext(ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v", stmt, err)
		}
	}
	// pruning with a cutoff before every record deletes nothing
	var n int64
	if err := e.DB.GetContext(ctx, &n, `SELECT audit_prune(now() - interval '1 day', 1000)`); err != nil || n != 0 {
		t.Fatalf("audit_prune deleted %d: %v", n, err)
	}
	var after int
	if err := e.DB.GetContext(ctx, &after, `SELECT count(*) FROM audit_log`); err != nil || after != before {
		t.Fatalf("%d records after the refused changes, %d before: %v", after, before, err)
	}
}

// TestAuditRetention: the retention job (a river periodic job, run at
// start) deletes the records older than COMPUTE_AUDIT_RETENTION and
// records its deletion in the platform's trail; younger records stay.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Instances: runner.Config{AuditRetention: 30 * 24 * time.Hour}})
	acme := newTenant(t, e, "acme")
	ctx := t.Context()
	// Records from long ago (as a replica running for a year would have).
	if _, err := e.DB.ExecContext(ctx, `INSERT INTO audit_log (tenant_id, audit_id, principal_id, principal_kind, principal_name,
			method, resource_type, resource_id, outcome, request_id, occurred_at)
		SELECT 'acme', 'aud_' || lpad(g::text, 26, '0'), $1, 'service', 'admin', 'projects.create', 'compute-tenant', 'acme',
			'success', 'old-' || g, now() - interval '40 days' - g * interval '1 hour'
		FROM generate_series(1, 25) g`, acme.Admin.PrincipalID); err != nil {
		t.Fatal(err)
	}
	young := recordsIn(t, e, "acme")
	e.RunReconciler()
	var prunes []auditRecord
	wait.Eventually(t, 30*time.Second, func() error {
		if prunes, _ = auditList(t, e, e.Operator, map[string]any{"tenantId": audit.PlatformTenant, "method": "audit.prune"}); len(prunes) == 0 {
			return errors.New("no audit.prune record")
		}
		return nil
	})
	if len(prunes) != 1 {
		t.Fatalf("prune records %+v", prunes)
	}
	p := prunes[0]
	var detail struct {
		Deleted int
		Before  time.Time
	}
	_ = json.Unmarshal(p.Detail, &detail)
	if p.Principal.Kind != audit.KindSystem || p.principal() != "system:audit.prune" || p.Outcome != audit.Success || detail.Deleted != 25 ||
		time.Since(detail.Before) < 29*24*time.Hour {
		t.Fatalf("prune record %+v %s", p, p.Detail)
	}
	if left := recordsIn(t, e, "acme"); left != young-25 {
		t.Fatalf("%d records left in acme, want %d", left, young-25)
	}
	// Pruning again deletes nothing and records nothing.
	n, err := audit.Prune(context.Background(), e.DB, time.Now().Add(-30*24*time.Hour))
	if err != nil || n != 0 {
		t.Fatalf("second prune: %d %v", n, err)
	}
}

func recordsIn(t testing.TB, e *testkit.Env, tenantID string) int {
	var n int
	if err := e.DB.GetContext(context.Background(), &n, `SELECT count(*) FROM audit_log WHERE tenant_id = $1`, tenantID); err != nil {
		t.Fatal(err)
	}
	return n
}

const auditFields = `totalCount pageInfo { hasNextPage endCursor } edges { cursor node { auditId tenantId method outcome requestId clientAddress occurredAt detail
	principal { principalId kind name tenantId } resource { type id } } }`

type gqlAuditConn struct {
	TotalCount int
	PageInfo   struct {
		HasNextPage bool
		EndCursor   *string
	}
	Edges []struct {
		Cursor string
		Node   struct {
			AuditID, TenantID, Method, Outcome, RequestID string
			Principal                                     struct {
				PrincipalID, Kind, Name string
				TenantID                *string
			}
			Resource struct{ Type, ID string }
		}
	}
}

// TestAuditGraph: Tenant.auditLog, Instance.auditLog, Pool.auditLog and
// ComputeNode.auditLog read the same records as audit.list, with the same
// permission: a member is refused the tenant's trail and sees no records on
// its resources; another tenant's admin is refused; a tenant a pool is
// offered to sees only its own records about the pool, the owner only its
// own; the reconciler's moves are the system principal's.
func TestAuditGraph(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	guest := newTenant(t, e, "guest")
	bm := e.Pool(acme.Admin.Token, "acme", "bm")
	node, _ := e.Node(acme.Admin.Token, "acme", bm)
	must(t, e.Call(acme.Admin.Token, "nodes/cordon", map[string]any{"tenantId": "acme", "nodeId": node}))
	vps := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"sim": map[string]any{"latencyMs": 0}})
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": vps, "toTenantId": "guest",
		"quota": map[string]any{"gpus": 2, "instances": 2}}))
	// guest's admin probes the pool's management: NOT_FOUND, guest's record.
	expect(t, e.Call(guest.Admin.Token, "pools/update", map[string]any{"tenantId": "guest", "poolId": vps, "name": "mine"}), nf, anyPath)
	inst := must(t, e.Call(guest.Member.Token, "instances/create", instanceIn("guest", vps, "g1", 1))).Str("instanceId")
	waitState(t, e, guest.Member.Token, "guest", inst, "running", 30*time.Second)
	must(t, e.Call(guest.Member.Token, "instances/stop", map[string]any{"tenantId": "guest", "instanceId": inst}))

	tenantQ := `query($t: String!) { tenant(tenantId: $t) { auditLog(first: 50) { ` + auditFields + ` } } }`
	var got struct {
		Tenant struct{ AuditLog gqlAuditConn }
	}
	// admin: every record of acme, newest first, as audit.list
	gqlData(t, e, acme.Admin.Token, tenantQ, map[string]any{"t": "acme"}, &got)
	listed, _ := auditList(t, e, acme.Admin.Token, map[string]any{"tenantId": "acme"})
	if got.Tenant.AuditLog.TotalCount != len(listed) || len(got.Tenant.AuditLog.Edges) != len(listed) {
		t.Fatalf("graph %d records (total %d), audit.list %d", len(got.Tenant.AuditLog.Edges), got.Tenant.AuditLog.TotalCount, len(listed))
	}
	for i, edge := range got.Tenant.AuditLog.Edges {
		if edge.Node.AuditID != listed[i].AuditID || edge.Node.TenantID != "acme" ||
			deref(edge.Node.Principal.TenantID) != deref(listed[i].Principal.TenantID) {
			t.Fatalf("graph record %d %+v, audit.list %+v", i, edge.Node, listed[i])
		}
	}
	// member, viewer, another tenant's admin: PERMISSION_DENIED on the field
	for _, tok := range []string{acme.Member.Token, acme.Viewer.Token, guest.Admin.Token} {
		if r := e.GraphQL(tok, tenantQ, map[string]any{"t": "acme"}); gqlCode(r) != pd {
			t.Fatalf("tenant auditLog for a non-admin: %s", r.Raw)
		}
	}
	// pages through the graph: first 2, then after the end cursor
	pageQ := `query($t: String!, $after: String) { tenant(tenantId: $t) { auditLog(first: 2, after: $after) { ` + auditFields + ` } } }`
	var walked []string
	var after any
	for {
		gqlData(t, e, acme.Admin.Token, pageQ, map[string]any{"t": "acme", "after": after}, &got)
		for _, edge := range got.Tenant.AuditLog.Edges {
			walked = append(walked, edge.Node.AuditID)
		}
		if !got.Tenant.AuditLog.PageInfo.HasNextPage {
			break
		}
		after = *got.Tenant.AuditLog.PageInfo.EndCursor
	}
	if len(walked) != len(listed) {
		t.Fatalf("graph pages walked %d records, want %d", len(walked), len(listed))
	}
	// a forged after is INVALID_INPUT
	// and so is one of the list's kind with an empty key (it read as the first page)
	if r := e.GraphQL(acme.Admin.Token, pageQ, map[string]any{"t": "acme", "after": base64.RawURLEncoding.EncodeToString([]byte(`["audit",""]`))}); gqlCode(r) != inv {
		t.Fatalf("an empty key: %s", r.Raw)
	}
	if r := e.GraphQL(acme.Admin.Token, pageQ, map[string]any{"t": "acme", "after": "bm90LWEtY3Vyc29y"}); gqlCode(r) != inv {
		t.Fatalf("forged after: %s", r.Raw)
	}

	// the pool: the owner's admin sees acme's records about it (create,
	// offer), never guest's probe; guest's admin sees only its probe.
	poolQ := `query($t: String!) { tenant(tenantId: $t) { pools(first: 10) { edges { node { poolId auditLog(first: 20) { ` + auditFields + ` } } } } } }`
	poolLog := func(token, tenant string) gqlAuditConn {
		var p struct {
			Tenant struct {
				Pools struct {
					Edges []struct {
						Node struct {
							PoolID   string
							AuditLog gqlAuditConn
						}
					}
				}
			}
		}
		gqlData(t, e, token, poolQ, map[string]any{"t": tenant}, &p)
		for _, edge := range p.Tenant.Pools.Edges {
			if edge.Node.PoolID == vps {
				return edge.Node.AuditLog
			}
		}
		t.Fatalf("pool %s not in %s's pools", vps, tenant)
		return gqlAuditConn{}
	}
	owner := poolLog(acme.Admin.Token, "acme")
	if methods := auditMethods(owner); methods != "pools.offer,pools.create" {
		t.Fatalf("the owner's pool records: %s", methods)
	}
	offered := poolLog(guest.Admin.Token, "guest")
	if methods := auditMethods(offered); methods != "pools.update" || offered.Edges[0].Node.TenantID != "guest" || offered.Edges[0].Node.Outcome != nf {
		t.Fatalf("the offered tenant's pool records: %+v", offered)
	}
	if member := poolLog(guest.Member.Token, "guest"); member.TotalCount != 0 || len(member.Edges) != 0 {
		t.Fatalf("a member reads pool records: %+v", member)
	}

	// the instance: guest's create, stop and the reconciler's moves
	instQ := `query($t: String!) { tenant(tenantId: $t) { instances(first: 5, state: null) { edges { node { instanceId auditLog(first: 50) { ` + auditFields + ` } } } } } }`
	var ig struct {
		Tenant struct {
			Instances struct {
				Edges []struct {
					Node struct{ AuditLog gqlAuditConn }
				}
			}
		}
	}
	gqlData(t, e, guest.Admin.Token, instQ, map[string]any{"t": "guest"}, &ig)
	if len(ig.Tenant.Instances.Edges) != 1 {
		t.Fatalf("instances: %+v", ig)
	}
	il := ig.Tenant.Instances.Edges[0].Node.AuditLog
	var system, calls int
	for _, edge := range il.Edges {
		switch {
		case edge.Node.Principal.Kind == "SYSTEM" && edge.Node.Principal.PrincipalID == "system:vps.instances" && strings.HasPrefix(edge.Node.Method, "vps.instances."):
			system++
		case edge.Node.Method == "instances.create" || edge.Node.Method == "instances.stop":
			calls++
		}
	}
	if system < 2 || calls != 2 {
		t.Fatalf("instance records: %s", auditMethods(il))
	}
	// acme's admin (the pool's owner) does not read guest's instance at all,
	// and the member reads it without records.
	gqlData(t, e, guest.Member.Token, instQ, map[string]any{"t": "guest"}, &ig)
	if len(ig.Tenant.Instances.Edges) != 1 || ig.Tenant.Instances.Edges[0].Node.AuditLog.TotalCount != 0 {
		t.Fatalf("a member's instance records: %+v", ig)
	}

	// the node: its join (a join token) and its cordon
	nodeQ := `query($t: String!, $n: String!) { tenant(tenantId: $t) { computeNode(nodeId: $n) { auditLog(first: 10) { ` + auditFields + ` } } } }`
	var ng struct {
		Tenant struct {
			ComputeNode struct{ AuditLog gqlAuditConn }
		}
	}
	gqlData(t, e, acme.Admin.Token, nodeQ, map[string]any{"t": "acme", "n": node}, &ng)
	nl := ng.Tenant.ComputeNode.AuditLog
	if auditMethods(nl) != "nodes.cordon,nodes.join" || nl.Edges[1].Node.Principal.Kind != "JOIN_TOKEN" {
		t.Fatalf("node records: %+v", nl)
	}
}

func auditMethods(c gqlAuditConn) string {
	var m []string
	for _, edge := range c.Edges {
		m = append(m, edge.Node.Method)
	}
	return strings.Join(m, ",")
}

// gqlData runs a GraphQL query that must succeed and decodes its data into v.
func gqlData(t testing.TB, e *testkit.Env, token, query string, vars map[string]any, v any) {
	t.Helper()
	d := gqlOK(t, env(t, e).GraphQL(token, query, vars))
	b, _ := json.Marshal(d)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("graphql data: %v: %s", err, b)
	}
}

func gqlCode(r testkit.Resp) string { c, _ := gqlErr(r); return c }

// A record's detail names what the call acted on besides its tenant and
// resource: the ids a create generated (the join token, the token and its
// principal, the workflow, the reservation, the machine, the profile),
// the key an allow-list change is about, and the join request a refused
// join names in its error (they were missing; a helper's probe).
func TestAuditDetailNamesWhatTheCallActedOn(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	detail := func(r testkit.Resp) map[string]any {
		t.Helper()
		a := recordOf(t, e, "acme", r.Header.Get("X-Request-Id"))
		var d map[string]any
		if err := json.Unmarshal(a.Detail, &d); err != nil {
			t.Fatalf("%s: detail %s: %v", a.Method, a.Detail, err)
		}
		return d
	}
	pool := e.Pool(acme.Admin.Token, "acme", "gpu")
	r := must(t, e.Call(acme.Admin.Token, "joinTokens/create", map[string]any{"tenantId": "acme", "poolId": pool, "maxUses": 5}))
	if d := detail(r); d["joinTokenId"] != r.Body["joinToken"].(map[string]any)["joinTokenId"] {
		t.Fatalf("joinTokens.create detail %v", d)
	}
	secret := r.Str("secret")
	r = must(t, e.Call(acme.Admin.Token, "tokens/create", map[string]any{"tenantId": "acme", "name": "ci", "role": "viewer"}))
	tok := r.Body["token"].(map[string]any)
	if d := detail(r); d["tokenId"] != tok["tokenId"] || d["principalId"] != tok["principalId"] {
		t.Fatalf("tokens.create detail %v", d)
	}
	hash := strings.Repeat("ab", 32)
	r = must(t, e.Call(acme.Admin.Token, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash}))
	if d := detail(r); d["ekHash"] != hash || d["kind"] == nil {
		t.Fatalf("tpmKeys.allow detail %v", d)
	}
	r = e.Call(acme.Admin.Token, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash})
	expect(t, r, "CONFLICT", "ekHash")
	if d := detail(r); d["ekHash"] != hash {
		t.Fatalf("a refused tpmKeys.allow's detail %v", d)
	}
	r = must(t, e.Call(acme.Admin.Token, "tpmKeys/disallow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash}))
	if d := detail(r); d["ekHash"] != hash {
		t.Fatalf("tpmKeys.disallow detail %v", d)
	}
	r = must(t, e.Call(acme.Admin.Token, "machines/register", map[string]any{"tenantId": "acme", "poolId": pool, "serial": "SN-1"}))
	if d := detail(r); d["machineId"] != r.Str("machineId") {
		t.Fatalf("machines.register detail %v", d)
	}
	// A deferred join names its request; its denied retry too.
	m := testkit.NewMachine(t)
	m.SystemUUID, m.Serial = "03000200-0400-0500-0006-000700080009", "To Be Filled By O.E.M."
	r = must(t, e.Call("", "nodes/join", m.JoinBody(secret)))
	jr := r.Str("joinRequestId")
	if d := detail(r); d["joinRequestId"] != jr {
		t.Fatalf("a deferred join's detail %v", d)
	}
	must(t, e.Call(acme.Admin.Token, "joinRequests/deny", map[string]any{"tenantId": "acme", "joinRequestId": jr}))
	r = e.Call("", "nodes/join", m.JoinBody(secret))
	expect(t, r, "PERMISSION_DENIED", "")
	if d := detail(r); d["joinRequestId"] != jr {
		t.Fatalf("a denied retry's detail %v", d)
	}
	// The workflow a create started, the reservation, the profile.
	nodeID, _ := e.Node(acme.Admin.Token, "acme", pool)
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""))
	r = must(t, e.Call(acme.Member.Token, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": nodeID, "profileId": "gpu-node"}))
	if d := detail(r); d["workflowId"] != r.Str("workflowId") || d["nodeId"] != nodeID || d["profileId"] != "gpu-node" || d["profileVersion"] != float64(1) {
		t.Fatalf("workflows.create detail %v", d)
	}
	// A call naming no tenant belongs to its credential's tenant: an admin
	// token's refused inventory.report is in acme's trail (it went to the
	// platform's, which acme's admins cannot read).
	r = e.Call(acme.Admin.Token, "inventory/report", map[string]any{"nodeId": nodeID, "sections": machineReport(t, 1)})
	expect(t, r, "PERMISSION_DENIED", "")
	if a := recordOf(t, e, "acme", r.Header.Get("X-Request-Id")); a.Method != "inventory.report" || a.Outcome != "PERMISSION_DENIED" {
		t.Fatalf("the refused report's record: %+v", a)
	}
	r = must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("other", 3), ""))
	if d := detail(r); d["profileId"] != "other" || d["profileVersion"] != float64(3) {
		t.Fatalf("profiles.create detail %v", d)
	}
	// Which version an update or a delete named (a probe could not tell
	// one version's delete from every version's), refused or not.
	r = must(t, e.Call(acme.Member.Token, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "other", "profileVersion": 3, "visibility": "private"}))
	if d := detail(r); d["profileVersion"] != float64(3) {
		t.Fatalf("profiles.update detail %v", d)
	}
	r = e.Call(acme.Member.Token, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "other", "profileVersion": 4, "visibility": "private"})
	expect(t, r, "NOT_FOUND", "")
	if d := detail(r); d["profileVersion"] != float64(4) {
		t.Fatalf("a refused profiles.update's detail %v", d)
	}
	r = must(t, e.Call(acme.Member.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "other", "profileVersion": 3}))
	if d := detail(r); d["profileVersion"] != float64(3) {
		t.Fatalf("profiles.delete detail %v", d)
	}
	vps := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	start := time.Now().UTC().Add(time.Hour)
	r = must(t, e.Call(acme.Member.Token, "reservations/create", map[string]any{"tenantId": "acme", "poolId": vps,
		"size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1}, "startsAt": start.Format(time.RFC3339), "endsAt": start.Add(time.Hour).Format(time.RFC3339)}))
	if d := detail(r); d["reservationId"] != r.Str("reservationId") {
		t.Fatalf("reservations.create detail %v", d)
	}
}

// A revoked token's use is recorded in its principal's tenant's trail, on
// every surface: its holder is known, and a token used after its
// revocation may have been stolen (it left no record; a revoked join
// token's did). An unknown secret names no one and is not recorded.
func TestARevokedTokensUseIsRecorded(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	old := newToken(t, e, acme.Admin.Token, "acme", "old-ci", "admin")
	must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": old.TokenID}))

	if r := e.Call(old.Token, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": "node_01jd0000000000000000000000"}); r.Status != 401 {
		t.Fatalf("nodes.remove with a revoked token: %d %s", r.Status, r.Raw)
	}
	if r := e.Call(old.Token, "nosuch/method", map[string]any{}); r.Status != 401 {
		t.Fatalf("an unknown method with a revoked token: %d %s", r.Status, r.Raw)
	}
	if r := e.GraphQL(old.Token, `{ viewer { principalId } }`, nil); r.Status != 401 {
		t.Fatalf("a query with a revoked token: %d %s", r.Status, r.Raw)
	}
	w := dialWS(t, e)
	w.send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + old.Token}})
	if code, _ := w.closed(5 * time.Second); code != 4403 {
		t.Fatalf("connection_init with a revoked token: close %d", code)
	}
	if r := e.Call("cmp_not-a-token-anyone-holds", "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": "node_01jd0000000000000000000000"}); r.Status != 401 {
		t.Fatalf("an unknown token: %d %s", r.Status, r.Raw)
	}

	all, _ := auditList(t, e, acme.Admin.Token, map[string]any{"tenantId": "acme", "limit": 200})
	var methods []string
	for _, a := range all {
		if a.Outcome != "UNAUTHENTICATED" {
			continue
		}
		if a.principal() != old.PrincipalID || a.Principal.Kind != "service" || a.Principal.Name != "old-ci" ||
			a.ClientAddress == nil || *a.ClientAddress != "127.0.0.1" || a.RequestID == "" ||
			a.Resource.Type != "compute-tenant" || a.Resource.ID != "acme" ||
			!strings.Contains(string(a.Detail), `"tokenId":"`+old.TokenID+`"`) || !strings.Contains(string(a.Detail), `"reason":"revoked-token"`) {
			t.Errorf("the record of a revoked token's use: %+v %s", a, a.Detail)
		}
		methods = append(methods, a.Method)
	}
	sort.Strings(methods)
	if strings.Join(methods, ",") != "graphql,graphql,nodes.remove,unknown" {
		t.Fatalf("revoked token's uses recorded: %v (all: %d records)", methods, len(all))
	}
	// The trail's own methods filter it, these included.
	if got, _ := auditList(t, e, acme.Admin.Token, map[string]any{"tenantId": "acme", "method": "graphql"}); len(got) != 2 {
		t.Fatalf("method graphql: %v", got)
	}
	// Any other single word is still no method.
	expect(t, e.Call(acme.Admin.Token, "audit/list", map[string]any{"tenantId": "acme", "method": "foo"}), "INVALID_INPUT", "method")
}

// deref is *p, or "<nil>".
func deref(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
