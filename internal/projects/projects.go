// Package projects holds projects: app-owned groupings of a tenant's work.
// The creator becomes the project's owner in the relationships; owners and
// members are decided on compute-project/{projectId}.
package projects

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/iam"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Cursors and MemberCursors are the kinds of the project and member lists'
// cursors (both surfaces).
var (
	Cursors       = page.Keyed("project", ids.Pattern(ids.Project))
	MemberCursors = page.Keyed("projectMember", ids.Pattern(ids.Principal))
)

// Project groups a tenant's work.
type Project struct {
	ProjectID   string    `json:"projectId" db:"project_id" doc:"The project's id (prj_ and a ULID)."`
	TenantID    string    `json:"tenantId" db:"tenant_id" doc:"The tenant the project lives in."`
	Name        string    `json:"name" db:"name" doc:"The project's name."`
	Description string    `json:"description" db:"description" doc:"The project's description; empty when none was given."`
	RowVersion  int       `json:"rowVersion" db:"row_version" doc:"The project's version, one more at every change: pass it as expectedVersion to change it only if nobody changed it since."`
	CreatedAt   time.Time `json:"createdAt" db:"created_at" doc:"When the project was created."`
	UpdatedAt   time.Time `json:"updatedAt" db:"updated_at" doc:"When the project last changed."`
}

// Member is a relationship on a project.
type Member struct {
	ProjectID   string    `json:"projectId" db:"project_id" doc:"The project."`
	PrincipalID string    `json:"principalId" db:"principal_id" doc:"The principal related to the project."`
	Relation    string    `json:"relation" db:"relation" doc:"The relation: owner (reads and manages the project) or member (reads it)."`
	CreatedAt   time.Time `json:"createdAt" db:"created_at" doc:"When the relationship was made."`
}

// Inputs.
type (
	CreateInput struct {
		TenantID    string  `json:"tenantId"`
		Name        string  `json:"name"`
		Description *string `json:"description,omitempty"`
	}
	RefInput struct {
		TenantID  string `json:"tenantId"`
		ProjectID string `json:"projectId"`
	}
	ListInput struct {
		TenantID string `json:"tenantId"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	UpdateInput struct {
		TenantID        string  `json:"tenantId"`
		ProjectID       string  `json:"projectId"`
		Name            *string `json:"name,omitempty"`
		Description     *string `json:"description,omitempty"`
		ExpectedVersion *int    `json:"expectedVersion,omitempty"`
	}
	MemberInput struct {
		TenantID    string `json:"tenantId"`
		ProjectID   string `json:"projectId"`
		PrincipalID string `json:"principalId"`
		Relation    string `json:"relation,omitempty"`
	}
	MemberListInput struct {
		TenantID  string `json:"tenantId"`
		ProjectID string `json:"projectId"`
		Limit     int    `json:"limit"`
		Cursor    string `json:"cursor,omitempty"`
	}
	Deleted struct {
		Deleted int `json:"deleted" doc:"How many projects were deleted."`
	}
	Removed struct {
		Removed int `json:"removed" doc:"How many relationships were removed."`
	}
)

const cols = `project_id, tenant_id, name, description, row_version, created_at, updated_at`

// relationGrants is the one table of what a project relationship grants its
// principal on the project, whatever its role on the tenant: the method
// surface's decision (resolve) and the graph's visibility predicate
// (visible) both read it. A tenant admin counts as an owner.
var relationGrants = map[string][]authz.Permission{
	"owner":  {authz.ProjectsRead, authz.ProjectsManage},
	"member": {authz.ProjectsRead},
}

// relationsGranting lists, as an SQL text[] literal, the relations that
// grant perm (constants of relationGrants, never input).
func relationsGranting(perm authz.Permission) string {
	var rels []string
	for rel, perms := range relationGrants {
		if slices.Contains(perms, perm) {
			rels = append(rels, rel)
		}
	}
	slices.Sort(rels)
	return `'{` + strings.Join(rels, ",") + `}'::text[]`
}

// relationOf is the principal's relationship to the project pr (an SQL
// expression, NULL for none); principal is an SQL text expression, lock ""
// or a locking clause.
func relationOf(principal, lock string) string {
	return `(SELECT r.relation FROM project_relations r WHERE r.project_id = pr.project_id AND r.principal_id = ` + principal + lock + `)`
}

// visible is the one read predicate over projects pr: a project is visible
// to the readers of its tenant (tenants, a text[] expression) and to the
// principals whose relationship grants the read (principal, an SQL text
// expression). The graph's loaders bind it to the caller's scope; the
// method surface's get reads through the same ByIDs bound to the one tenant
// its decision named (authz.TenantScope). A tenant's list of projects is
// decided on the tenant and read by PagesByTenant on both surfaces.
func visible(principal string) func(tenants string) string {
	readers := relationsGranting(authz.ProjectsRead)
	return func(tenants string) string {
		return `(pr.tenant_id = ANY(` + tenants + `) OR ` + relationOf(principal, "") + ` = ANY(` + readers + `))`
	}
}

func init() { authz.Register(authz.Project, resolve) }

// resolve is the relationship resolver of compute-project: the project must
// live in the named tenant; its owner and members hold what relationGrants
// says; a tenant admin counts as an owner.
func resolve(ctx context.Context, q store.Q, p *reqctx.Principal, role string, r authz.Resource) (authz.Visibility, error) {
	lock, lockProject := "", ""
	if authz.Locking(ctx) {
		if err := authz.HoldAuthority(ctx, q, authz.ProjectRelations(r.ID)); err != nil {
			return authz.Visibility{}, err
		}
		// A mutation: hold the relation and the project until the write
		// commits, so a removal in flight is waited for and then seen. The
		// project's own lock matters when a deletion takes both: the
		// relation is read after the wait, and without it the project
		// would be the one read before (there, but no relation:
		// PERMISSION_DENIED for a project that is gone).
		lock, lockProject = " FOR SHARE", " FOR KEY SHARE OF pr"
	}
	var rel sql.NullString
	err := q.GetContext(ctx, &rel, `SELECT `+relationOf("$3", lock)+`
		FROM projects pr WHERE pr.project_id = $1 AND pr.tenant_id = $2`+lockProject, r.ID, r.TenantID, p.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return authz.Visibility{}, nil
	}
	if err != nil {
		return authz.Visibility{}, store.Wrap(err)
	}
	v := authz.Visibility{Exists: true, Direct: relationGrants[rel.String]}
	if role == authz.RoleAdmin {
		v.Direct = relationGrants["owner"]
	}
	return v, nil
}

// relationsTurn locates a change of a project's relations (its deletion
// included) and takes them exclusively (authz.ChangingAuthority) before the
// decision, which holds them too: the change waits for the mutations
// decided on them, and the ones after it wait for it and see what it
// left. Taken there first, two changes of one project take turns, where
// each holding them shared from its decision and waiting for the other's
// to end deadlocked. A caller the decision then refuses held the turn only
// for its refusal.
//
// The caller's role binding is held before it, as every decision holds it
// before the project's relations: taken after them, a change of the
// caller's binding queued between closed a cycle with the caller's other
// calls (binding, then relations), which PostgreSQL broke only after its
// deadlock timeout (a probe: calls stalled 1–5 s in every round).
func relationsTurn(ctx context.Context, q store.Q, tenantID, projectID string) (authz.Resource, error) {
	if err := authz.HoldBinding(ctx, q, reqctx.PrincipalFrom(ctx), tenantID); err != nil {
		return authz.Resource{}, err
	}
	if err := authz.ChangingAuthority(ctx, q, authz.ProjectRelations(projectID)); err != nil {
		return authz.Resource{}, err
	}
	return authz.Resource{Type: authz.Project, TenantID: tenantID, ID: projectID}, nil
}

// updateTurn locates an update of a project and takes its row FOR UPDATE
// before the decision, after the caller's binding and the project's
// relations (held shared, as the decision holds them: the order of every
// transaction). The decision holds the row FOR KEY SHARE; a rename then
// needs it FOR UPDATE (the name is a key), and two renames that both held
// it shared deadlocked (8 racing renames: a deadlock in most rounds, each
// broken after PostgreSQL's deadlock timeout, and a caller that lost five
// times was answered with it). Taken here first, updates take turns.
func updateTurn(ctx context.Context, q store.Q, in *UpdateInput) (authz.Resource, error) {
	if err := authz.HoldBinding(ctx, q, reqctx.PrincipalFrom(ctx), in.TenantID); err != nil {
		return authz.Resource{}, err
	}
	if err := authz.HoldAuthority(ctx, q, authz.ProjectRelations(in.ProjectID)); err != nil {
		return authz.Resource{}, err
	}
	if _, err := q.ExecContext(ctx, `SELECT 1 FROM projects WHERE tenant_id = $1 AND project_id = $2 FOR UPDATE`, in.TenantID, in.ProjectID); err != nil {
		return authz.Resource{}, store.Wrap(err)
	}
	return authz.Resource{Type: authz.Project, TenantID: in.TenantID, ID: in.ProjectID}, nil
}

func deleteTurn(ctx context.Context, q store.Q, in *RefInput) (authz.Resource, error) {
	return relationsTurn(ctx, q, in.TenantID, in.ProjectID)
}

func memberTurn(ctx context.Context, q store.Q, in *MemberInput) (authz.Resource, error) {
	return relationsTurn(ctx, q, in.TenantID, in.ProjectID)
}

func removeTurn(ctx context.Context, q store.Q, in *MemberInput) (authz.Resource, error) {
	return relationsTurn(ctx, q, in.TenantID, in.ProjectID)
}

// Create stores a project and makes the caller its owner.
func Create(ctx context.Context, q store.Q, in *CreateInput) (*Project, error) {
	desc := ""
	if in.Description != nil {
		desc = *in.Description
	}
	var pr Project
	err := q.GetContext(ctx, &pr, `INSERT INTO projects (project_id, tenant_id, name, description)
		VALUES ($1, $2, $3, $4) RETURNING `+cols, ids.New(ids.Project), in.TenantID, in.Name, desc)
	if store.IsUnique(err, "projects_tenant_name_key") {
		return nil, errs.E(errs.Conflict, "project %q already exists in tenant %s", in.Name, in.TenantID).With("path", "name")
	}
	if store.IsForeignKey(err) {
		return nil, errs.E(errs.NotFound, "tenant %s not found", in.TenantID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	p := reqctx.PrincipalFrom(ctx)
	_, err = q.ExecContext(ctx, `INSERT INTO project_relations (project_id, principal_id, relation) VALUES ($1, $2, 'owner')`, pr.ProjectID, p.ID)
	return &pr, store.Wrap(err)
}

func get(ctx context.Context, q store.Q, tenantID, projectID string) (*Project, error) {
	found, err := ByIDs(ctx, q, authz.TenantScope(tenantID), []string{projectID})
	if err != nil {
		return nil, err
	}
	if found[projectID] == nil {
		return nil, errs.E(errs.NotFound, "project %s not found", projectID)
	}
	return found[projectID], nil
}

// Get returns one project: the graph's read (ByIDs) in the tenant the
// decision named.
func Get(ctx context.Context, q store.Q, in *RefInput) (*Project, error) {
	return get(ctx, q, in.TenantID, in.ProjectID)
}

// List pages the tenant's projects by id: the graph's page (PagesByTenant)
// of the tenant the decision named.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Project], error) {
	var after string
	if _, err := Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows, err := PagesByTenant(ctx, q, []string{in.TenantID}, after, in.Limit)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(rows.Items, in.Limit, func(p Project) string { return Cursors.Encode(p.ProjectID) })
	return &page.Page[Project]{Items: items, Cursor: cur}, nil
}

// Update changes name and/or description; expectedVersion is compared with
// rowVersion and a mismatch is CONFLICT.
func Update(ctx context.Context, q store.Q, in *UpdateInput) (*Project, error) {
	if in.Name == nil && in.Description == nil {
		return nil, errs.Invalid("name", "pass name, description or both")
	}
	var pr Project
	err := q.GetContext(ctx, &pr, `UPDATE projects SET
			name = COALESCE($3, name), description = COALESCE($4, description),
			row_version = row_version + 1, updated_at = now()
		WHERE tenant_id = $1 AND project_id = $2 AND ($5::int IS NULL OR row_version = $5)
		RETURNING `+cols, in.TenantID, in.ProjectID, in.Name, in.Description, in.ExpectedVersion)
	if store.IsUnique(err, "projects_tenant_name_key") {
		return nil, errs.E(errs.Conflict, "project %q already exists in tenant %s", *in.Name, in.TenantID).With("path", "name")
	}
	if errors.Is(err, sql.ErrNoRows) {
		cur, gerr := get(ctx, q, in.TenantID, in.ProjectID)
		if gerr != nil {
			return nil, gerr
		}
		return nil, errs.E(errs.Conflict, "project %s is at rowVersion %d, not %d", in.ProjectID, cur.RowVersion, *in.ExpectedVersion).
			With("rowVersion", cur.RowVersion)
	}
	return &pr, store.Wrap(err)
}

// Delete removes a project and its relationships.
func Delete(ctx context.Context, q store.Q, in *RefInput) (*Deleted, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM projects WHERE tenant_id = $1 AND project_id = $2`, in.TenantID, in.ProjectID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return nil, errs.E(errs.NotFound, "project %s not found", in.ProjectID)
	}
	return &Deleted{Deleted: int(n)}, nil
}

// AddMember relates a principal to one of the tenant's projects (member
// unless owner is asked). Like every write here it touches only the named
// tenant's project: another tenant's is NOT_FOUND.
func AddMember(ctx context.Context, q store.Q, in *MemberInput) (*Member, error) {
	if err := iam.VisiblePrincipal(ctx, q, in.TenantID, in.PrincipalID); err != nil {
		return nil, err
	}
	var m Member
	err := q.GetContext(ctx, &m, `INSERT INTO project_relations (project_id, principal_id, relation)
		SELECT pr.project_id, $2, $3 FROM projects pr WHERE pr.project_id = $1 AND pr.tenant_id = $4
		ON CONFLICT (project_id, principal_id) DO UPDATE SET relation = EXCLUDED.relation
		RETURNING project_id, principal_id, relation, created_at`, in.ProjectID, in.PrincipalID, in.Relation, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "project %s not found", in.ProjectID)
	}
	return &m, store.Wrap(err)
}

// RemoveMember removes a principal's relationship to one of the tenant's
// projects.
func RemoveMember(ctx context.Context, q store.Q, in *MemberInput) (*Removed, error) {
	res, err := q.ExecContext(ctx, `DELETE FROM project_relations r USING projects pr
		WHERE r.project_id = $1 AND r.principal_id = $2 AND pr.project_id = r.project_id AND pr.tenant_id = $3`,
		in.ProjectID, in.PrincipalID, in.TenantID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return nil, errs.E(errs.NotFound, "principal %s is not a member of project %s", in.PrincipalID, in.ProjectID)
	}
	return &Removed{Removed: int(n)}, nil
}

// ListMembers pages the project's relationships by principal id: the
// graph's page (MemberPagesByProject) in the tenant the decision named.
func ListMembers(ctx context.Context, q store.Q, in *MemberListInput) (*page.Page[Member], error) {
	var after string
	if _, err := MemberCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows, err := MemberPagesByProject(ctx, q, authz.TenantScope(in.TenantID), []string{in.ProjectID}, after, in.Limit)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(rows.Items, in.Limit, func(m Member) string { return MemberCursors.Encode(m.PrincipalID) })
	return &page.Page[Member]{Items: items, Cursor: cur}, nil
}

// Group describes the projects group.
var Group = registry.Group{Name: "projects", Summary: "Projects group a tenant's work without creating more tenants. A project lives in one tenant, and its creator becomes its owner in the authorization projection; membership is a relationship on `compute-project/{id}`."}

// Methods are the projects group's registry entries.
func Methods() []registry.Method {
	m := func(name string, kind registry.Kind, perm authz.Permission, res, summary string, notes []string, in ...registry.Field) registry.Method {
		return registry.Method{Group: "projects", Name: name, Kind: kind, Permission: perm, Resource: res,
			Summary: summary, Notes: notes, Module: "core", Phase: "v0.1", Input: in}
	}
	ref := []registry.Field{registry.TenantID(), registry.ID("projectId", ids.Project)}
	desc := registry.Field{Name: "description", Type: registry.String, MaxLength: 2000}
	principal := registry.ID("principalId", ids.Principal)
	list := m("list", registry.Read, authz.ProjectsRead, authz.Tenant,
		"Returns a page of the tenant's projects, ordered by id.",
		[]string{"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
		registry.TenantID(), registry.PageLimit(), registry.Cursor())
	list.Items = true
	return []registry.Method{
		registry.Def(m("create", registry.Mutation, authz.ProjectsCreate, authz.Tenant,
			"Creates a project; the caller becomes its owner.",
			[]string{"`CONFLICT` when the tenant already has a project of that name."},
			registry.TenantID(), registry.Name(true), desc), nil, Create),
		registry.Def(m("get", registry.Read, authz.ProjectsRead, authz.Project,
			"Returns one project.", []string{"`NOT_FOUND` when the tenant has no such project."}, ref...), nil, Get),
		registry.Def(list, nil, List),
		registry.Def(m("update", registry.Mutation, authz.ProjectsManage, authz.Project,
			"Changes a project's name or description and returns it.",
			[]string{"Pass `name`, `description` or both; neither is `INVALID_INPUT`.",
				"`expectedVersion` is the project's rowVersion; a mismatch is `CONFLICT`.",
				"Project owners and tenant admins may update."},
			append(append([]registry.Field{}, ref...), registry.Name(false), desc,
				registry.ExpectedVersion())...), updateTurn, Update),
		registry.Def(m("delete", registry.Mutation, authz.ProjectsManage, authz.Project,
			"Deletes a project and its relationships and returns the number deleted.",
			[]string{"The project's instances stay, in the tenant, with `projectId` null (so do instances created in the project while the delete runs)."}, ref...), deleteTurn, Delete),
		registry.Def(m("addMember", registry.Mutation, authz.ProjectsManage, authz.Project,
			"Relates a principal to the project as member (default) or owner.",
			[]string{"`NOT_FOUND` when no such user or service principal exists, or when it is another tenant's and holds no role on this one (the same answer: nothing of another tenant's principals shows). The operator may name any user or service principal: that is how one principal comes to hold roles on several tenants."},
			append(append([]registry.Field{}, ref...), principal,
				registry.Field{Name: "relation", Type: registry.String, Enum: []string{"member", "owner"}, Default: "member"})...), memberTurn, AddMember),
		registry.Def(m("removeMember", registry.Mutation, authz.ProjectsManage, authz.Project,
			"Removes a principal's relationship to the project.",
			[]string{"`NOT_FOUND` when the principal is not related to the project."},
			append(append([]registry.Field{}, ref...), principal)...), removeTurn, RemoveMember),
		registry.Def(m("listMembers", registry.Read, authz.ProjectsRead, authz.Project,
			"Returns a page of the project's owners and members, ordered by principal id.",
			[]string{"`limit` defaults to 50 and is at most 200."},
			append(append([]registry.Field{}, ref...), registry.PageLimit(), registry.Cursor())...), nil, ListMembers),
	}
}

type tenantRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Project
}

// PagesByTenant returns one page of projects for each tenant in one statement.
func PagesByTenant(ctx context.Context, q store.Q, tenantIDs []string, after string, limit int) (page.Rows[Project], error) {
	var rows []tenantRow
	parents, arg := page.Parents(tenantIDs)
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM projects c WHERE c.tenant_id = t.parent) AS total_count
			FROM `+parents+`)
		SELECT t.parent AS parent_key, t.total_count,
		       p.project_id, p.tenant_id, p.name, p.description, p.row_version, p.created_at, p.updated_at
		FROM t
		CROSS JOIN LATERAL (
			SELECT * FROM projects WHERE tenant_id = t.parent AND project_id > $2 ORDER BY project_id LIMIT $3
		) p`, arg, after, limit+1)
	var r page.Rows[Project]
	for _, x := range rows {
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.Project)
	}
	return r, store.Wrap(err)
}

// CountByTenant counts the projects of each tenant.
func CountByTenant(ctx context.Context, q store.Q, tenantIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT tenant_id AS k, count(*) AS n FROM projects WHERE tenant_id = ANY($1) GROUP BY tenant_id`, tenantIDs)
}

type memberRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Member
}

// MemberPagesByProject returns one page of relationships for each project
// visible in scope.
func MemberPagesByProject(ctx context.Context, q store.Q, scope authz.Scope, projectIDs []string, after string, limit int) (page.Rows[Member], error) {
	var rows []memberRow
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM project_relations c WHERE c.project_id = t.parent) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count,
		       m.project_id, m.principal_id, m.relation, m.created_at
		FROM t
		JOIN projects pr ON pr.project_id = t.parent AND `+authz.Where("$4", visible("$5"))+`
		CROSS JOIN LATERAL (
			SELECT * FROM project_relations WHERE project_id = t.parent AND principal_id > $2 ORDER BY principal_id LIMIT $3
		) m`, projectIDs, after, limit+1, scope.Arg(), scope.Principal())
	var r page.Rows[Member]
	for _, x := range rows {
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.Member)
	}
	return r, store.Wrap(err)
}

// CountMembersByProject counts each project's relationships.
func CountMembersByProject(ctx context.Context, q store.Q, scope authz.Scope, projectIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT c.project_id AS k, count(*) AS n FROM project_relations c
		JOIN projects pr ON pr.project_id = c.project_id AND `+authz.Where("$2", visible("$3"))+`
		WHERE c.project_id = ANY($1) GROUP BY c.project_id`, projectIDs, scope.Arg(), scope.Principal())
}

// ByIDs loads the projects of ids visible in scope, keyed by id.
func ByIDs(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]*Project, error) {
	var rows []Project
	if err := q.SelectContext(ctx, &rows, `SELECT `+cols+` FROM projects pr WHERE project_id = ANY($1) AND `+authz.Where("$2", visible("$3")),
		ids, scope.Arg(), scope.Principal()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*Project, len(rows))
	for i := range rows {
		out[rows[i].ProjectID] = &rows[i]
	}
	return out, nil
}
