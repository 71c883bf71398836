// Package profiles holds profiles: versioned recipes provisioning workflows
// run (steps, drivers, an image, user data and host config). Lookups see the
// tenant's own profiles, public ones of any tenant, and the read-only
// profiles modules ship under the tenant builtin.
package profiles

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// cursors is the kind of the profile lists' cursors (both surfaces).
var cursors = page.Keyed("profile", registry.ProfileIDPattern, `^[1-9][0-9]*$`, `^[0-9a-f]{32}$`) // id, version, ownerKey

// Profile is one stored (or shipped) profile version.
type Profile struct {
	TenantID       string          `json:"tenantId" db:"tenant_id" doc:"The tenant that holds the version: the caller's, another tenant's (a public one), or builtin (one a module ships)."`
	ProfileID      string          `json:"profileId" db:"profile_id" doc:"The profile's id, as its document's id gives it."`
	ProfileVersion int             `json:"profileVersion" db:"profile_version" doc:"The version, as its document's version gives it."`
	Visibility     string          `json:"visibility" db:"visibility" schema:"ProfileVisibility" doc:"A private version is its tenant's alone; every tenant reads a public one."`
	Document       json.RawMessage `json:"document" db:"-" schema:"ProfileDocument" doc:"The profile document."`
	RowVersion     int             `json:"rowVersion" db:"row_version" doc:"One more at every change of the stored version, its first use by a workflow included: pass it as expectedVersion to change it only if nobody changed it since."`
	Used           bool            `json:"used" db:"used" doc:"True once a workflow has used this version (workflows.create): its document can no longer change. Always false for a builtin profile (tenant builtin), which no tenant can change and whose uses are each tenant's own."`
	CreatedAt      time.Time       `json:"createdAt" db:"created_at" doc:"When the version was stored."`
	UpdatedAt      time.Time       `json:"updatedAt" db:"updated_at" doc:"When the version last changed."`

	Doc string `json:"-" db:"document"`
	// ownerKey orders versions of one id held by several tenants (md5 of
	// the tenant id, so a cursor stays short).
	OwnerKey string `json:"-" db:"owner_key"`
}

// ReadSize is what reading the profile spends of a request's read budget
// (store.SelectSpending).
func (p *Profile) ReadSize() int { return len(p.Doc) }

func (p *Profile) fix() *Profile {
	if p.Doc != "" {
		p.Document = json.RawMessage(p.Doc)
	}
	if p.OwnerKey == "" {
		p.OwnerKey = ownerKey(p.TenantID)
	}
	return p
}

func ownerKey(tenantID string) string {
	s := md5.Sum([]byte(tenantID))
	return hex.EncodeToString(s[:])
}

// Inputs and outputs.
type (
	CreateInput struct {
		TenantID   string          `json:"tenantId"`
		Document   json.RawMessage `json:"document"`
		Visibility *string         `json:"visibility"` // defaulted by the registry
	}
	RefInput struct {
		TenantID       string `json:"tenantId"`
		ProfileID      string `json:"profileId"`
		ProfileVersion *int   `json:"profileVersion,omitempty"`
	}
	ListInput struct {
		TenantID string `json:"tenantId"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	UpdateInput struct {
		TenantID        string          `json:"tenantId"`
		ProfileID       string          `json:"profileId"`
		ProfileVersion  int             `json:"profileVersion"`
		Document        json.RawMessage `json:"document,omitempty"`
		Visibility      *string         `json:"visibility,omitempty"`
		ExpectedVersion *int            `json:"expectedVersion,omitempty"`
	}
	Validation struct {
		Valid  bool    `json:"valid" doc:"True when the document resolves: no issues."`
		Issues []Issue `json:"issues" doc:"Every issue found expanding the document against the step registry (empty when valid)."`
	}
	Render struct {
		Profile *Profile   `json:"profile" doc:"The profile version rendered."`
		Steps   []Rendered `json:"steps" doc:"The expanded steps a workflow of this version would run, in order."`
	}
	Deleted struct {
		Deleted int `json:"deleted" doc:"How many profile versions were deleted."`
	}
)

const cols = `tenant_id, profile_id, profile_version, visibility, document::text AS document, row_version, used, created_at, updated_at, md5(tenant_id) AS owner_key`

func init() { authz.Register(authz.Profile, resolve) }

// Visible is the one visibility predicate over stored profile versions p:
// a version is visible to the tenants of the text[] expression tenants when
// one of them owns it or it is public, and it is not deleted. (Builtin
// profiles ship in code and are visible to every reader.) Every read uses
// it: the decision, get, list, and the graph's batches.
func Visible(tenants string) string { return `(` + live + ` AND ` + readable(tenants) + `)` }

// live and readable are Visible's two parts. Under authz.Where, whose
// NULL scope (the operator's) skips the predicate whole, only readable
// goes inside: a deleted version is no one's to read.
const live = `p.deleted_at IS NULL`

func readable(tenants string) string {
	return `(p.tenant_id = ANY(` + tenants + `) OR p.visibility = 'public')`
}

// visibleIn is Visible for a scope bound to param (authz.Where).
func visibleIn(param string) string { return `(` + live + ` AND ` + authz.Where(param, readable) + `)` }

// resolve is the resolver of compute-profile: a profile is visible to the
// named tenant when the tenant stores a version of it, another tenant
// publishes one, or a module ships it. Writes only ever touch the tenant's
// own stored versions (the handlers' statements are scoped to the tenant),
// so writing a profile the tenant only sees as public or builtin is
// NOT_FOUND, as the seed says: "NOT_FOUND when the tenant has no such version".
func resolve(ctx context.Context, q store.Q, _ *reqctx.Principal, _ string, r authz.Resource) (authz.Visibility, error) {
	if _, ok := builtin(r.ID, 0); ok {
		return authz.Visibility{Exists: true}, nil
	}
	var ok bool
	err := q.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM profiles p
		WHERE profile_id = $1 AND `+Visible("ARRAY[$2]")+`)`, r.ID, r.TenantID)
	if err != nil {
		return authz.Visibility{}, store.Wrap(err)
	}
	return authz.Visibility{Exists: ok}, nil
}

func notFound(id string, version *int) error {
	if version != nil {
		return errs.E(errs.NotFound, "profile %s version %d not found", id, *version)
	}
	return errs.E(errs.NotFound, "profile %s not found", id)
}

// lookup finds the version a read resolves to: the tenant's own, then a
// public stored one, then one a module ships; the latest when version is nil.
func lookup(ctx context.Context, q store.Q, tenantID, id string, version *int) (*Profile, error) {
	var p Profile
	err := q.GetContext(ctx, &p, `SELECT `+cols+` FROM profiles p
		WHERE profile_id = $2 AND `+Visible("ARRAY[$1]")+`
		  AND ($3::int IS NULL OR profile_version = $3)
		ORDER BY (tenant_id = $1) DESC, profile_version DESC, tenant_id COLLATE "C"
		LIMIT 1`, tenantID, id, version)
	if err == nil {
		return p.fix(), nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, store.Wrap(err)
	}
	v := 0
	if version != nil {
		v = *version
	}
	if b, ok := builtin(id, v); ok {
		return b, nil
	}
	return nil, notFound(id, version)
}

// Create stores a new profile version.
func Create(ctx context.Context, q store.Q, in *CreateInput) (*Profile, error) {
	c, err := checkDocument(in.Document)
	if err != nil {
		return nil, err
	}
	vis := Private
	if in.Visibility != nil {
		vis = *in.Visibility
	}
	var p Profile
	err = inTx(ctx, q, func(q store.Q) error {
		if vis == Public {
			refused, err := claimPublic(ctx, q, in.TenantID, c.ID)
			if err != nil {
				return err
			}
			if refused != nil {
				return refused
			}
		}
		return insert(ctx, q, &p, in.TenantID, c, vis)
	})
	if err != nil {
		return nil, err
	}
	return p.fix(), nil
}

// insert stores a new version; Create's transaction holds the id's public
// claim first when vis is public.
func insert(ctx context.Context, q store.Q, p *Profile, tenantID string, c *checked, vis string) error {
	// Deleting hides a version (deleted_at) and keeps its row: the id and
	// version still name the document workflows snapshotted, so a deleted
	// version exists as much as a live one and is never stored again. The
	// primary key decides it, so a create racing a delete cannot revive it.
	err := q.GetContext(ctx, p, `INSERT INTO profiles (tenant_id, profile_id, profile_version, visibility, document)
		VALUES ($1, $2, $3, $4, $5::jsonb)
		ON CONFLICT (tenant_id, profile_id, profile_version) DO NOTHING
		RETURNING `+cols, tenantID, c.ID, c.Version, vis, string(c.Raw))
	if errors.Is(err, sql.ErrNoRows) {
		return errs.E(errs.Conflict, "profile %s version %d already exists in tenant %s (a deleted version's id and version are not stored again); create the next version instead",
			c.ID, c.Version, tenantID).With("path", "document.version")
	}
	if store.IsForeignKey(err) {
		return errs.E(errs.NotFound, "tenant %s not found", tenantID)
	}
	return store.Wrap(err)
}

// inTx runs fn in q when q is a transaction, else in a transaction of its
// own: an id's public claim and the versions it covers commit together.
func inTx(ctx context.Context, q store.Q, fn func(q store.Q) error) error {
	if db, ok := q.(*store.DB); ok {
		return db.Tx(ctx, func(tx *sqlx.Tx) error { return fn(tx) })
	}
	return fn(q)
}

// A public profile id belongs to one tenant (public_profile_ids, migration
// 00014): lookups prefer a public stored version to a shipped one, so a
// second publisher of an id, or a tenant publishing an id a module ships,
// would switch every other tenant's lookups to its document.
//
// Lock order: the id's claim row first, then the versions' rows (Create,
// Update and Delete all do), so publishing and releasing an id never
// deadlock with each other or with a workflow's row lock (ForUse).

// claimPublic makes tenantID the publisher of id for the rest of the
// caller's transaction (the claim row stays locked until it ends). refused
// is CONFLICT at visibility when id is one a module ships or another
// tenant publishes it; err is the database's. Two tenants claiming at once
// queue on the id's row; the second sees the first's claim once it commits.
func claimPublic(ctx context.Context, q store.Q, tenantID, id string) (refused, err error) {
	if shippedID(id) {
		return errs.E(errs.Conflict, "profile id %s is one a module ships; a tenant's version of it can only be private", id).
			With("path", "visibility"), nil
	}
	// The claim row is inserted unless one exists (ON CONFLICT without a
	// target, which takes a conflict on either of the table's unique keys:
	// with ON CONFLICT (profile_id), two of one tenant's transactions
	// claiming at once could meet on (profile_id, tenant_id) first, and one
	// failed with the unique violation), then read and locked. A release
	// between the two statements deletes it: the claim is tried again.
	var owner string
	for attempt := 0; ; attempt++ {
		if _, err := q.ExecContext(ctx, `INSERT INTO public_profile_ids (profile_id, tenant_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id, tenantID); err != nil {
			return nil, store.Wrap(err)
		}
		err = q.GetContext(ctx, &owner, `SELECT tenant_id FROM public_profile_ids WHERE profile_id = $1 FOR UPDATE`, id)
		if !errors.Is(err, sql.ErrNoRows) || attempt == 3 {
			break
		}
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if owner != tenantID {
		return errs.E(errs.Conflict, "profile id %s is published by another tenant, and a public profile id belongs to one tenant; keep this version private or choose another id", id).
			With("path", "visibility"), nil
	}
	return nil, nil
}

// lockClaim locks tenantID's claim of id, if it holds one, before a change
// that may leave it no public version of id (releaseIfUnused then runs).
func lockClaim(ctx context.Context, q store.Q, tenantID, id string) (bool, error) {
	var owner string
	err := q.GetContext(ctx, &owner, `SELECT tenant_id FROM public_profile_ids
		WHERE profile_id = $1 AND tenant_id = $2 FOR UPDATE`, id, tenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, store.Wrap(err)
}

// releaseIfUnused frees id for other tenants once tenantID, whose claim
// the caller locked (lockClaim), has no live public version of it left.
func releaseIfUnused(ctx context.Context, q store.Q, tenantID, id string) error {
	_, err := q.ExecContext(ctx, `DELETE FROM public_profile_ids
		WHERE profile_id = $1 AND tenant_id = $2
		  AND NOT EXISTS (SELECT 1 FROM profiles p WHERE p.tenant_id = $2 AND p.profile_id = $1
		                  AND p.visibility = 'public' AND p.deleted_at IS NULL)`, id, tenantID)
	return store.Wrap(err)
}

// Get returns one profile version.
func Get(ctx context.Context, q store.Q, in *RefInput) (*Profile, error) {
	return lookup(ctx, q, in.TenantID, in.ProfileID, in.ProfileVersion)
}

// Validate expands a profile version and returns every issue.
func Validate(ctx context.Context, q store.Q, in *RefInput) (*Validation, error) {
	p, err := lookup(ctx, q, in.TenantID, in.ProfileID, in.ProfileVersion)
	if err != nil {
		return nil, err
	}
	_, issues := Expand(p.Document)
	return &Validation{Valid: len(issues) == 0, Issues: issues}, nil
}

// RenderProfile returns the document and the expanded steps.
func RenderProfile(ctx context.Context, q store.Q, in *RefInput) (*Render, error) {
	p, err := lookup(ctx, q, in.TenantID, in.ProfileID, in.ProfileVersion)
	if err != nil {
		return nil, err
	}
	out, issues := Expand(p.Document)
	if len(issues) > 0 {
		return nil, Unresolved(p, issues, issues[0].Path)
	}
	return &Render{Profile: p, Steps: out}, nil
}

// ErrorIssues is the most issues an error answer carries: a document of
// 200 steps gave 399 issues, a 92 KB answer of render or workflows.create
// (validate answers every one).
const ErrorIssues = 20

// Unresolved is the INVALID_INPUT of a profile version that does not
// resolve, for render and workflows.create: its first ErrorIssues issues
// in details.issues and how many there are in details.issueCount.
func Unresolved(p *Profile, issues []Issue, path string) error {
	shown := issues[:min(len(issues), ErrorIssues)]
	msg := fmt.Sprintf("profile %s version %d does not resolve: %d issues", p.ProfileID, p.ProfileVersion, len(issues))
	if len(shown) < len(issues) {
		msg += fmt.Sprintf(" (the first %d in details.issues; profiles.validate lists every one)", len(shown))
	}
	return errs.E(errs.InvalidInput, "%s", msg).With("path", path).With("issues", shown).With("issueCount", len(issues))
}

type listKey struct {
	ID      string
	Version int
	Owner   string
}

func keyOf(p *Profile) listKey { return listKey{p.ProfileID, p.ProfileVersion, p.OwnerKey} }

func (a listKey) less(b listKey) bool {
	if a.ID != b.ID {
		return a.ID < b.ID
	}
	if a.Version != b.Version {
		return a.Version < b.Version
	}
	return a.Owner < b.Owner
}

// List pages the tenant's own, public and builtin profiles by (profileId,
// profileVersion, owner). The cursor is the key of the last item, so rows
// added before it never shift a page. It is the graph's Tenant.profiles
// batch for one tenant.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Profile], error) {
	if err := CheckCursor(in.Cursor); err != nil {
		return nil, err
	}
	r, err := PagesByTenant(ctx, q, []string{in.TenantID}, in.Cursor, in.Limit)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(r.Items, in.Limit, func(p Profile) string { return CursorOf(&p) })
	return &page.Page[Profile]{Items: items, Cursor: cur}, nil
}

// CheckCursor refuses a list cursor this server did not return.
func CheckCursor(cursor string) error {
	var after listKey
	_, err := cursors.Decode(cursor, &after.ID, &after.Version, &after.Owner)
	return err
}

type tenantRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Profile
}

// PagesByTenant returns, in one statement, one page (limit+1 rows, to tell
// a next page) of each tenant's own, public and builtin profiles after the
// cursor, ordered as List orders them, with the number of them all. Each
// tenant also gets one row with an empty profile id that only carries its
// total, so a tenant whose page holds no stored profile still has one.
func PagesByTenant(ctx context.Context, q store.Q, tenantIDs []string, cursor string, limit int) (page.Rows[Profile], error) {
	var after listKey
	has, err := cursors.Decode(cursor, &after.ID, &after.Version, &after.Owner)
	if err != nil {
		return page.Rows[Profile]{}, err
	}
	var rows []tenantRow
	err = store.SelectSpending(ctx, q, &rows, `
		SELECT t.parent AS parent_key, c.n AS total_count, x.*
		FROM unnest($1::text[]) AS t(parent)
		CROSS JOIN LATERAL (SELECT count(*) AS n FROM profiles p WHERE `+Visible("ARRAY[t.parent]")+`) c
		CROSS JOIN LATERAL ((
			SELECT `+cols+` FROM profiles p
			WHERE `+Visible("ARRAY[t.parent]")+`
			  AND (NOT $2::bool OR profile_id COLLATE "C" > $3
			       OR (profile_id = $3 AND (profile_version > $4 OR (profile_version = $4 AND md5(tenant_id) COLLATE "C" > $5))))
			ORDER BY profile_id COLLATE "C", profile_version, md5(tenant_id) COLLATE "C"
			LIMIT $6
		) UNION ALL
			SELECT '', '', 0, '', '', 0, false, 'epoch'::timestamptz, 'epoch'::timestamptz, ''
		) x`, tenantIDs, has, after.ID, after.Version, after.Owner, limit+1)
	if err != nil {
		return page.Rows[Profile]{}, store.Wrap(err)
	}
	byTenant := make(map[string][]Profile, len(tenantIDs))
	totals := make(map[string]int, len(tenantIDs))
	for _, x := range rows {
		totals[x.Parent] = x.Total + len(builtins)
		if x.ProfileID != "" {
			byTenant[x.Parent] = append(byTenant[x.Parent], *x.Profile.fix())
		}
	}
	var out page.Rows[Profile]
	for _, t := range tenantIDs {
		list := byTenant[t]
		for i := range builtins {
			b := builtins[i]
			b.fix()
			if !has || after.less(keyOf(&b)) {
				list = append(list, b)
			}
		}
		sort.SliceStable(list, func(i, j int) bool { return keyOf(&list[i]).less(keyOf(&list[j])) })
		if len(list) > limit+1 {
			list = list[:limit+1]
		}
		for _, p := range list {
			out.Parents, out.Totals, out.Items = append(out.Parents, t), append(out.Totals, totals[t]), append(out.Items, p)
		}
	}
	return out, nil
}

// CountByTenant counts each tenant's own, public and builtin profiles (for
// tenants whose page is empty: past the end).
func CountByTenant(ctx context.Context, q store.Q, tenantIDs []string) (map[string]int, error) {
	m, err := store.CountBy(ctx, q, `SELECT t.parent AS k, (SELECT count(*) FROM profiles p WHERE `+Visible("ARRAY[t.parent]")+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, tenantIDs)
	for k := range m {
		m[k] += len(builtins)
	}
	return m, err
}

// Update replaces the document and/or the visibility of one of the tenant's
// own versions.
func Update(ctx context.Context, q store.Q, in *UpdateInput) (*Profile, error) {
	hasDoc := len(in.Document) > 0 && string(in.Document) != "null"
	if !hasDoc && in.Visibility == nil {
		return nil, errs.Invalid("document", "pass document, visibility or both")
	}
	var doc *string
	if hasDoc {
		c, err := checkDocument(in.Document)
		if err != nil {
			return nil, err
		}
		if c.ID != in.ProfileID {
			return nil, errs.Invalid("document.id", "document.id must stay %q", in.ProfileID)
		}
		if c.Version != in.ProfileVersion {
			return nil, errs.Invalid("document.version", "document.version must stay %d", in.ProfileVersion)
		}
		s := string(c.Raw)
		doc = &s
	}
	var p Profile
	err := inTx(ctx, q, func(q store.Q) error { return update(ctx, q, in, doc, &p) })
	if err != nil {
		return nil, err
	}
	return p.fix(), nil
}

func update(ctx context.Context, q store.Q, in *UpdateInput, doc *string, p *Profile) error {
	// A visibility change takes the id's claim row first (the lock order
	// above): making it public claims the id, refused after the row's own
	// checks; making it private may release it.
	var refused error
	held := false
	if in.Visibility != nil {
		var err error
		if *in.Visibility == Public {
			refused, err = claimPublic(ctx, q, in.TenantID, in.ProfileID)
		} else {
			held, err = lockClaim(ctx, q, in.TenantID, in.ProfileID)
		}
		if err != nil {
			return err
		}
	}
	// The row lock orders this update against a workflow's first use (ForUse
	// and MarkUsed, which take the same lock): used is read under the lock,
	// so either the new document commits before the workflow snapshots it,
	// or the workflow commits first and this is INVALID_STATE.
	var cur Profile
	err := q.GetContext(ctx, &cur, `SELECT `+cols+` FROM profiles
		WHERE tenant_id = $1 AND profile_id = $2 AND profile_version = $3 AND deleted_at IS NULL
		FOR UPDATE`, in.TenantID, in.ProfileID, in.ProfileVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return errs.E(errs.NotFound, "tenant %s has no profile %s version %d", in.TenantID, in.ProfileID, in.ProfileVersion)
	}
	if err != nil {
		return store.Wrap(err)
	}
	if in.ExpectedVersion != nil && *in.ExpectedVersion != cur.RowVersion {
		return errs.E(errs.Conflict, "profile %s version %d is at rowVersion %d, not %d",
			in.ProfileID, in.ProfileVersion, cur.RowVersion, *in.ExpectedVersion).With("rowVersion", cur.RowVersion)
	}
	if refused != nil {
		return refused
	}
	if doc != nil && cur.Used {
		return errs.E(errs.InvalidState, "profile %s version %d has been used by a workflow; its document cannot change, create the next version instead",
			in.ProfileID, in.ProfileVersion).With("path", "document")
	}
	err = q.GetContext(ctx, p, `UPDATE profiles SET
			document = COALESCE($4::jsonb, document), visibility = COALESCE($5, visibility),
			row_version = row_version + 1, updated_at = now()
		WHERE tenant_id = $1 AND profile_id = $2 AND profile_version = $3 AND deleted_at IS NULL
		RETURNING `+cols, in.TenantID, in.ProfileID, in.ProfileVersion, doc, in.Visibility)
	if err != nil {
		return store.Wrap(err)
	}
	if held {
		return releaseIfUnused(ctx, q, in.TenantID, in.ProfileID)
	}
	return nil
}

// Delete hides one version, or every version, of the tenant's own profile;
// the tenant's last public version of the id going frees the id.
func Delete(ctx context.Context, q store.Q, in *RefInput) (*Deleted, error) {
	var n int64
	err := inTx(ctx, q, func(q store.Q) error {
		held, err := lockClaim(ctx, q, in.TenantID, in.ProfileID)
		if err != nil {
			return err
		}
		res, err := q.ExecContext(ctx, `UPDATE profiles SET deleted_at = now(), updated_at = now()
			WHERE tenant_id = $1 AND profile_id = $2 AND ($3::int IS NULL OR profile_version = $3) AND deleted_at IS NULL`,
			in.TenantID, in.ProfileID, in.ProfileVersion)
		if err != nil {
			return store.Wrap(err)
		}
		if n, _ = res.RowsAffected(); n == 0 {
			return notFound(in.ProfileID, in.ProfileVersion)
		}
		if held {
			return releaseIfUnused(ctx, q, in.TenantID, in.ProfileID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Deleted{Deleted: int(n)}, nil
}

// Group describes the profiles group.
var Group = registry.Group{Name: "profiles", Summary: "The profiles group stores and checks the versioned recipes that provisioning workflows run: steps, drivers, an image, user data and host config. A version becomes immutable the first time a workflow uses it. Lookups see the tenant's own profiles, public ones, and the read-only profiles that modules ship under the tenant `builtin`. See [Profiles and images](../guides/bare-metal/profiles-and-images.md)."}

// The rules of making a version public, in create's and update's notes.
const (
	publicShipped = "A profile id a module ships can only be stored private: `visibility` public is `CONFLICT`, with `details.path` `visibility`. The tenant's own private version of it is what its own lookups find first; other tenants' lookups still find the shipped one."
	publicOwned   = "A public profile id belongs to one tenant: `visibility` public is `CONFLICT`, with `details.path` `visibility`, when another tenant has a public version of that id. The id is free again once that tenant has none left (made private or deleted)."
)

// Methods are the profiles group's registry entries.
// sizeNote states a document's size bounds, for the methods that store one.
var sizeNote = fmt.Sprintf("A document is at most %d bytes of JSON, counted as written compactly with its strings in UTF-8 (an escape such as `\\u00e9` counts as the character it stands for, whitespace between tokens not at all; more is `INVALID_INPUT` at `document`), and its `userData` at most %d bytes of UTF-8.", MaxDocument, MaxUserData)

func Methods() []registry.Method {
	m := func(name string, kind registry.Kind, perm authz.Permission, res, summary string, notes []string, in ...registry.Field) registry.Method {
		return registry.Method{Group: "profiles", Name: name, Kind: kind, Permission: perm, Resource: res,
			Summary: summary, Notes: notes, Module: "provision", Phase: "v0.2", Input: in}
	}
	profileID, version := IDField, VersionField
	ref := func() []registry.Field { return []registry.Field{registry.TenantID(), profileID(), version(false)} }
	visibility := registry.EnumField("visibility", VisibilityEnum, false)
	createVis := visibility
	createVis.Default = "private"
	list := m("list", registry.Read, authz.ProfilesRead, authz.Tenant,
		"Returns a page of the tenant's stored profiles, public ones and those modules ship, ordered by id and version.",
		[]string{"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
		registry.TenantID(), registry.PageLimit(), registry.Cursor())
	list.Items = true
	return []registry.Method{
		registry.Def(m("create", registry.Mutation, authz.ProfilesManage, authz.Tenant,
			"Stores a new profile version from a profile document, private unless `visibility` says public.",
			[]string{"Decided as `compute:profiles:manage` on the tenant.",
				"The document is checked like `defineProfile`; any problem is `INVALID_INPUT`, with `details.path` naming the first offending field.",
				sizeNote,
				"`CONFLICT` when that id and version already exist; create the next version instead.",
				"A deleted version still exists: its id and version are `CONFLICT` too, and it stays hidden.",
				publicShipped, publicOwned},
			registry.TenantID(), registry.Field{Name: "document", Type: registry.Object, Required: true, Open: true, Schema: DocumentSchema}, createVis), nil, Create).WithAuditOutput("profileId", "profileVersion"),
		registry.Def(m("get", registry.Read, authz.ProfilesRead, authz.Profile,
			"Returns one profile version, the latest when `profileVersion` is omitted.",
			[]string{"The lookup prefers the tenant's own profile, then a public stored one, then one a module ships. `NOT_FOUND` when none matches."},
			ref()...), nil, Get),
		registry.Def(m("validate", registry.Read, authz.ProfilesRead, authz.Profile,
			"Expands a profile version against the registered steps and returns `valid` with every issue found, such as a `use` that does not resolve or a `with` its step rejects.",
			[]string{"Problems in the profile are returned as issues rather than thrown; an unknown profile is `NOT_FOUND`."},
			ref()...), nil, Validate),
		registry.Def(m("render", registry.Read, authz.ProfilesRead, authz.Profile,
			"Returns the profile document and the expanded steps a workflow of this version would run, with their phases.",
			[]string{"`INVALID_INPUT` when the profile does not resolve, with the problems in `details.issues`; `NOT_FOUND` for an unknown profile."},
			ref()...), nil, RenderProfile),
		registry.Def(list, nil, List),
		registry.Def(m("update", registry.Mutation, authz.ProfilesManage, authz.Profile,
			"Replaces the document of one of the tenant's profile versions, or changes its visibility, and returns the profile.",
			[]string{"Pass `document`, `visibility` or both; neither is `INVALID_INPUT`.",
				"A version a workflow has used keeps its document: `INVALID_STATE`. Its visibility can still change.",
				"A new document must keep the profile's id and version (`INVALID_INPUT`).", sizeNote,
				"`expectedVersion` is the profile's rowVersion; a mismatch is `CONFLICT`.",
				"`NOT_FOUND` when the tenant has no such version.",
				publicShipped, publicOwned},
			registry.TenantID(), profileID(), version(true),
			registry.Field{Name: "document", Type: registry.Any, Schema: DocumentSchema}, visibility,
			registry.ExpectedVersion()), nil, Update).WithAuditFields("profileVersion"),
		registry.Def(m("delete", registry.Mutation, authz.ProfilesManage, authz.Profile,
			"Hides one version, or every version when `profileVersion` is omitted, from new workflows and returns the number deleted.",
			[]string{"Workflows already started keep the profile document they snapshotted. Profiles that modules ship are not stored, so deleting one is `NOT_FOUND`, as is a profile the tenant does not have.",
				"A deleted version stays hidden for good, and its id and version are never stored again: `profiles.create` refuses them as existing; create the next version instead.",
				"Deleting the tenant's last public version of an id frees the id for another tenant to publish."},
			ref()...), nil, Delete).WithAuditFields("profileVersion"),
	}
}

// CursorOf is the list cursor that resumes after p (GraphQL edge cursors).
func CursorOf(p *Profile) string {
	return cursors.Encode(p.ProfileID, p.ProfileVersion, p.fix().OwnerKey)
}
