package projects_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
	"github.com/bettercompute/computed/internal/testkit/held"
	"github.com/bettercompute/computed/internal/testkit/storm"
	"github.com/jmoiron/sqlx"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type env struct {
	*fixture.F
	acme, beta fixture.Tenant
}

func newEnv(t *testing.T) *env {
	t.Parallel()
	f := fixture.New(t)
	return &env{F: f, acme: f.Tenant("acme"), beta: f.Tenant("beta")}
}

func (e *env) create(name string) *projects.Project {
	e.T.Helper()
	return fixture.Must(fixture.Call[projects.Project](e.F, e.acme.Member, "projects.create", map[string]any{"tenantId": "acme", "name": name}))
}

// The creator owns the project: it manages it while another member of the
// tenant only reads it (unless made an owner); an admin counts as an owner.
func TestCreatorOwnsTheProject(t *testing.T) {
	e := newEnv(t)
	pr := e.create("web")
	if pr.RowVersion != 1 || pr.TenantID != "acme" || pr.Description != "" {
		t.Fatalf("created: %+v", pr)
	}
	_, err := fixture.Call[projects.Project](e.F, e.acme.Member, "projects.create", map[string]any{"tenantId": "acme", "name": "web"})
	fixture.Code(t, err, errs.Conflict, "name")
	_, err = fixture.Call[projects.Project](e.F, e.acme.Viewer, "projects.create", map[string]any{"tenantId": "acme", "name": "v"})
	fixture.Code(t, err, errs.PermissionDenied, "")

	other := e.Principal("acme", "member")
	upd := func(p *reqctx.Principal, name string) error {
		_, err := fixture.Call[projects.Project](e.F, p, "projects.update", map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "name": name})
		return err
	}
	fixture.Code(t, upd(other, "x"), errs.PermissionDenied, "")
	if err := upd(e.acme.Member, "web-2"); err != nil {
		t.Fatalf("the owner: %v", err)
	}
	if err := upd(e.acme.Admin, "web-3"); err != nil {
		t.Fatalf("an admin: %v", err)
	}
	// Made an owner, the other member manages it; a plain member relation reads only.
	fixture.Must(fixture.Call[projects.Member](e.F, e.acme.Member, "projects.addMember",
		map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "principalId": other.ID, "relation": "owner"}))
	if err := upd(other, "web-4"); err != nil {
		t.Fatalf("a new owner: %v", err)
	}
	fixture.Must(fixture.Call[projects.Member](e.F, e.acme.Member, "projects.addMember",
		map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "principalId": other.ID, "relation": "member"}))
	fixture.Code(t, upd(other, "web-5"), errs.PermissionDenied, "")
	// Removed: the relation is gone; removing it again is NOT_FOUND.
	fixture.Must(fixture.Call[projects.Removed](e.F, e.acme.Member, "projects.removeMember",
		map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "principalId": other.ID}))
	_, err = fixture.Call[projects.Removed](e.F, e.acme.Member, "projects.removeMember",
		map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "principalId": other.ID})
	fixture.Code(t, err, errs.NotFound, "")
}

// Another tenant neither sees nor manages the project, and cannot be made
// one of its members.
func TestProjectsStayInTheirTenant(t *testing.T) {
	e := newEnv(t)
	pr := e.create("web")
	_, err := projects.Get(e.Ctx, e.DB, &projects.RefInput{TenantID: "beta", ProjectID: pr.ProjectID})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[projects.Project](e.F, e.beta.Admin, "projects.get", map[string]any{"tenantId": "beta", "projectId": pr.ProjectID})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[projects.Deleted](e.F, e.beta.Admin, "projects.delete", map[string]any{"tenantId": "beta", "projectId": pr.ProjectID})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[projects.Project](e.F, e.beta.Admin, "projects.get", map[string]any{"tenantId": "acme", "projectId": pr.ProjectID})
	fixture.Code(t, err, errs.PermissionDenied, "")
	_, err = projects.Update(e.Ctx, e.DB, &projects.UpdateInput{TenantID: "beta", ProjectID: pr.ProjectID, Name: fixture.Ptr("x")})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = projects.Delete(e.Ctx, e.DB, &projects.RefInput{TenantID: "beta", ProjectID: pr.ProjectID})
	fixture.Code(t, err, errs.NotFound, "")
	// beta's principal cannot be related to acme's project.
	_, err = fixture.Call[projects.Member](e.F, e.acme.Admin, "projects.addMember",
		map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "principalId": e.beta.Member.ID})
	fixture.Code(t, err, errs.NotFound, "")
	if l := fixture.Must(projects.List(e.Ctx, e.DB, &projects.ListInput{TenantID: "beta", Limit: 10})); len(l.Items) != 0 {
		t.Fatalf("beta lists %d projects", len(l.Items))
	}
	// The graph: tenant readers and related principals read it; the zero scope nothing.
	for _, c := range []struct {
		scope authz.Scope
		want  int
	}{{authz.TenantScope("acme"), 1}, {authz.TenantScope("beta"), 0}, {authz.Scope{}, 0}} {
		if got := fixture.Must(projects.ByIDs(e.Ctx, e.DB, c.scope, []string{pr.ProjectID})); len(got) != c.want {
			t.Fatalf("scope %+v reads %d", c.scope, len(got))
		}
	}
}

func TestUpdateRules(t *testing.T) {
	e := newEnv(t)
	pr := e.create("web")
	e.create("db")
	up := func(in projects.UpdateInput) (*projects.Project, error) {
		in.TenantID, in.ProjectID = "acme", pr.ProjectID
		return projects.Update(e.Ctx, e.DB, &in)
	}
	_, err := up(projects.UpdateInput{})
	fixture.Code(t, err, errs.InvalidInput, "name")
	_, err = up(projects.UpdateInput{Name: fixture.Ptr("db")})
	fixture.Code(t, err, errs.Conflict, "name")
	got := fixture.Must(up(projects.UpdateInput{Description: fixture.Ptr("the site"), ExpectedVersion: fixture.Ptr(1)}))
	if got.Description != "the site" || got.Name != "web" || got.RowVersion != 2 {
		t.Fatalf("updated: %+v", got)
	}
	_, err = up(projects.UpdateInput{Name: fixture.Ptr("x"), ExpectedVersion: fixture.Ptr(1)})
	if fixture.Code(t, err, errs.Conflict, "").Details["rowVersion"] != 2 {
		t.Fatalf("conflict: %v", err)
	}
	_, err = projects.Update(e.Ctx, e.DB, &projects.UpdateInput{TenantID: "acme", ProjectID: "prj_00000000000000000000000000", Name: fixture.Ptr("x"), ExpectedVersion: fixture.Ptr(1)})
	fixture.Code(t, err, errs.NotFound, "")
	// Racing writers with one expectedVersion: one wins.
	fixture.OneWins(t, 8, func(i int) error {
		_, err := fixture.Call[projects.Project](e.F, e.acme.Admin, "projects.update",
			map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "name": fmt.Sprint("n", i), "expectedVersion": 2})
		return err
	})
	// Delete removes the project and its relations.
	if d := fixture.Must(projects.Delete(e.Ctx, e.DB, &projects.RefInput{TenantID: "acme", ProjectID: pr.ProjectID})); d.Deleted != 1 {
		t.Fatalf("deleted %d", d.Deleted)
	}
	var n int
	if err := e.DB.Get(&n, `SELECT count(*) FROM project_relations WHERE project_id = $1`, pr.ProjectID); err != nil || n != 0 {
		t.Fatalf("%d relations left, %v", n, err)
	}
}

func TestListPages(t *testing.T) {
	e := newEnv(t)
	var want []string
	for i := 0; i < 5; i++ {
		want = append(want, e.create(fmt.Sprint("p", i)).ProjectID)
	}
	slices.Sort(want)
	for limit := 1; limit <= 6; limit++ {
		got := fixture.Walk(t, limit, func(cursor string) (*page.Page[projects.Project], error) {
			return projects.List(e.Ctx, e.DB, &projects.ListInput{TenantID: "acme", Limit: limit, Cursor: cursor})
		}, func(p projects.Project) string { return p.ProjectID })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("limit %d: %v, want %v", limit, got, want)
		}
	}
	counts := fixture.Must(projects.CountByTenant(e.Ctx, e.DB, []string{"acme", "beta"}))
	if counts["acme"] != 5 || counts["beta"] != 0 {
		t.Fatalf("counts %v", counts)
	}
	members := fixture.Must(projects.ListMembers(e.Ctx, e.DB, &projects.MemberListInput{TenantID: "acme", ProjectID: want[0], Limit: 10}))
	if len(members.Items) != 1 || members.Items[0].Relation != "owner" || members.Items[0].PrincipalID != e.acme.Member.ID {
		t.Fatalf("members: %+v", members.Items)
	}
	if m := fixture.Must(projects.ListMembers(e.Ctx, e.DB, &projects.MemberListInput{TenantID: "beta", ProjectID: want[0], Limit: 10})); len(m.Items) != 0 {
		t.Fatalf("beta reads acme's project members: %+v", m.Items)
	}
}

// Relationships are changed only on the named tenant's projects, in the
// domain itself as in the decision: another tenant naming acme's project
// relates no one and removes no one (NOT_FOUND).
func TestMembershipStaysInTheTenant(t *testing.T) {
	e := newEnv(t)
	pr := e.create("web")
	_, err := projects.AddMember(e.As(e.beta.Admin), e.DB, &projects.MemberInput{TenantID: "beta", ProjectID: pr.ProjectID,
		PrincipalID: e.beta.Member.ID, Relation: "owner"})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = projects.RemoveMember(e.As(e.beta.Admin), e.DB, &projects.MemberInput{TenantID: "beta", ProjectID: pr.ProjectID,
		PrincipalID: e.acme.Member.ID})
	fixture.Code(t, err, errs.NotFound, "")
	m := fixture.Must(projects.ListMembers(e.Ctx, e.DB, &projects.MemberListInput{TenantID: "acme", ProjectID: pr.ProjectID, Limit: 10}))
	if len(m.Items) != 1 || m.Items[0].PrincipalID != e.acme.Member.ID || m.Items[0].Relation != "owner" {
		t.Fatalf("acme's project's members: %+v", m.Items)
	}
}

// A project deleted while its owner's call waits for the deletion is gone
// for that call: NOT_FOUND, as it is for any call after the deletion, not
// PERMISSION_DENIED (the relation read after the wait, the project before
// it: a probe saw 1–2 of 16 owners racing deletes denied).
func TestCallsWaitingOnADeletionFindTheProjectGone(t *testing.T) {
	e := newEnv(t)
	for _, call := range []struct {
		method string
		args   map[string]any
	}{
		{"projects.update", map[string]any{"description": "x"}},
		{"projects.addMember", map[string]any{"principalId": e.acme.Viewer.ID}},
		{"projects.delete", map[string]any{}},
	} {
		pr := e.create("p-" + call.method)
		in := map[string]any{"tenantId": "acme", "projectId": pr.ProjectID}
		for k, v := range call.args {
			in[k] = v
		}
		err := held.While(t, e.DB, func(tx *sqlx.Tx) error {
			_, err := tx.Exec(`DELETE FROM projects WHERE project_id = $1`, pr.ProjectID)
			return err
		}, func() error {
			_, err := fixture.Call[map[string]any](e.F, e.acme.Member, call.method, in)
			return err
		})
		fixture.Code(t, err, errs.NotFound, "")
	}
}

// A project's owner making calls without pause keeps neither the removal
// of its relation nor the project's deletion waiting: each call held the
// relation's row (a share lock, which a new one overtakes while a removal
// waits) until it committed, and the removal ran into the statement
// timeout.
func TestRemovalsAreNotStarvedByTheOwnersCalls(t *testing.T) {
	e := newEnv(t)
	for _, removal := range []string{"projects.removeMember", "projects.delete"} {
		pr := e.create("busy-" + removal)
		stop := storm.Start(t, 16, 50, func(i, j int) {
			fixture.Call[projects.Project](e.F, e.acme.Member, "projects.update", //nolint:errcheck // refused once removed
				map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "description": fmt.Sprint(i, "-", j)})
		})
		in := map[string]any{"tenantId": "acme", "projectId": pr.ProjectID}
		var err error
		if removal == "projects.removeMember" {
			in["principalId"] = e.acme.Member.ID
			_, err = fixture.Call[projects.Removed](e.F, e.acme.Admin, removal, in)
		} else {
			_, err = fixture.Call[projects.Deleted](e.F, e.acme.Admin, removal, in)
		}
		stop()
		if err != nil {
			t.Fatalf("%s while the owner makes calls: %v", removal, err)
		}
	}
}

// A change of a project's relations holds its caller's role binding before
// the relations, as every decision does (binding, then relations): held
// after them, a grant of the caller's binding queued between closed a
// cycle with the caller's other calls, which PostgreSQL broke only after
// its deadlock timeout (a probe's calls stalled 1–5 s in every round).
// Here the caller's other call holds its binding, a grant waits for it,
// and the change waits behind the grant: the other call's hold of the
// relations must be granted without waiting (it waited for the change).
func TestRelationChangesHoldTheCallersBindingFirst(t *testing.T) {
	e := newEnv(t)
	pr := e.create("cycle")
	c := e.acme.Member
	binding, relations := string(authz.Binding("acme", c.ID)), string(authz.ProjectRelations(pr.ProjectID))
	call, err := e.DB.BeginTxx(e.Ctx, nil) // the caller's other call
	if err != nil {
		t.Fatal(err)
	}
	defer call.Rollback() //nolint:errcheck // only held
	if _, err := call.Exec(`SELECT authority_held($1)`, binding); err != nil {
		t.Fatal(err)
	}
	grant, err := e.DB.BeginTxx(e.Ctx, nil) // members.grant of the caller
	if err != nil {
		t.Fatal(err)
	}
	defer grant.Rollback() //nolint:errcheck // only held
	// waitFor returns once n sessions wait for a lock.
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var waiting int
			if err := e.DB.Get(&waiting, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`); err != nil {
				t.Fatal(err)
			}
			if waiting >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions wait for a lock, not %d", waiting, n)
			}
		}
	}
	granted := make(chan error, 1)
	go func() {
		_, err := grant.Exec(`SELECT authority_changing($1)`, binding)
		granted <- err
	}()
	waitFor(1) // the grant queued first, then the change
	changed := make(chan error, 1)
	go func() {
		_, err := fixture.Call[projects.Member](e.F, c, "projects.addMember",
			map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "principalId": e.acme.Viewer.ID})
		changed <- err
	}()
	waitFor(2)
	if _, err := call.Exec(`SET LOCAL lock_timeout = '500ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := call.Exec(`SELECT authority_held($1)`, relations); err != nil {
		t.Fatalf("the caller's call waited for the relations, held by a change queued behind the grant: %v", err)
	}
	if err := call.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if err := grant.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
}

// Racing renames of one project, each with the same expectedVersion: one
// wins and the others are CONFLICT, in every round. Each decision held the
// project's row FOR KEY SHARE and each rename then needed it FOR UPDATE (the
// name is a key): two renames deadlocked, PostgreSQL broke the cycle after
// its deadlock timeout, and a caller that lost five times got the
// deadlock (make test: 1 of 3 runs).
func TestRacingRenamesDoNotDeadlock(t *testing.T) {
	e := newEnv(t)
	pr := e.create("web")
	var deadlocks int
	for round := 0; round < 6; round++ {
		version := round + 1
		errors := make([]error, 8)
		done := make(chan int)
		for i := range errors {
			go func(i int) {
				_, errors[i] = fixture.Call[projects.Project](e.F, e.acme.Admin, "projects.update",
					map[string]any{"tenantId": "acme", "projectId": pr.ProjectID, "name": fmt.Sprintf("web-%d-%d", round, i), "expectedVersion": version})
				done <- i
			}(i)
		}
		for range errors {
			<-done
		}
		won := 0
		for _, err := range errors {
			switch {
			case err == nil:
				won++
			case errs.CodeOf(err) != errs.Conflict:
				t.Errorf("round %d: a loser: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of 8 won", round, won)
		}
	}
	var n int64
	if err := e.DB.Get(&n, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`); err != nil {
		t.Fatal(err)
	}
	deadlocks = int(n)
	if deadlocks != 0 {
		t.Fatalf("PostgreSQL broke %d deadlocks", deadlocks)
	}
}
