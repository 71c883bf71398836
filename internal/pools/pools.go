// Package pools holds compute pools: the nodes of one site under one GPU
// model, one sharing mode and one policy. The tenant that creates a pool owns
// it; other tenants see it only once the owner offers it to them with a
// quota. Decisions are made on compute-pool/{poolId}.
package pools

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/jsonnum"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pgtext"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Cursors is the kind of the pool lists' cursors (both surfaces).
var Cursors = page.Keyed("pool", ids.Pattern(ids.Pool))

// OfferCursors is the kind of the cursors of a pool's offers (the graph's
// Pool.offers), keyed by the tenant offered to.
var OfferCursors = page.Keyed("poolOffer", registry.TenantPattern)

// Sharing modes and kinds of pools.
const (
	Exclusive  = "exclusive"
	MIG        = "mig"
	TimeSliced = "time-sliced"

	BareMetal   = "bare-metal"
	VPSHosted   = "vps-hosted"
	VPSProvider = "vps-provider"
)

// Closed sets and documents of pools, named for the OpenAPI document and
// the GraphQL enums.
var (
	SharingModeEnum = registry.DefineEnum("PoolSharingMode", "how the pool's GPUs are shared between instances", Exclusive, MIG, TimeSliced)
	KindEnum        = registry.DefineEnum("PoolKind", "where the pool's capacity comes from", BareMetal, VPSHosted, VPSProvider)
	StateEnum       = registry.DefineEnum("PoolState", "an archived pool takes no new offers, joins or changes", Active, Archived)
)

// Pool is one compute pool.
type Pool struct {
	PoolID          string          `json:"poolId" db:"pool_id" doc:"The pool's id (pool_ and a ULID)."`
	TenantID        string          `json:"tenantId" db:"tenant_id" doc:"The owner."`
	Name            string          `json:"name" db:"name" doc:"The pool's name, unique among the owner's pools."`
	Site            string          `json:"site" db:"site" doc:"The site the pool's machines are at, as the owner named it."`
	GPUModel        string          `json:"gpuModel" db:"gpu_model" doc:"The GPU model of the pool's nodes, as the owner named it."`
	SharingMode     string          `json:"sharingMode" db:"sharing_mode" schema:"PoolSharingMode" doc:"How the pool's GPUs are shared between instances: whole GPUs, MIG devices or time slices."`
	Kind            string          `json:"kind" db:"kind" schema:"PoolKind" doc:"Where the pool's capacity comes from: bare-metal machines, its own nodes hosting instances (vps-hosted), or a provider creating them (vps-provider)."`
	Provider        *string         `json:"provider" db:"provider" doc:"The provider that creates a vps-provider pool's instances (sim by default); null for other kinds."`
	ProviderAccount *string         `json:"providerAccount" db:"provider_account" doc:"The account at the provider that the pool's instances are created under, as the owner gave it; null when none was given."`
	Policy          json.RawMessage `json:"policy" db:"-" schema:"PoolPolicy" doc:"The pool's policy ({} when none was given): the keys the server reads (capacity, timeSlices, timeouts, ...) and any other the owner keeps."`
	State           string          `json:"state" db:"state" schema:"PoolState" doc:"An archived pool takes no new offers, joins or changes."`
	RowVersion      int             `json:"rowVersion" db:"row_version" doc:"The pool's version, one more at every change: pass it as expectedVersion to change it only if nobody changed it since."`
	CreatedAt       time.Time       `json:"createdAt" db:"created_at" doc:"When the pool was created."`
	UpdatedAt       time.Time       `json:"updatedAt" db:"updated_at" doc:"When the pool last changed."`

	PolicyText string `json:"-" db:"policy"`

	// View is the tenant the graph reached the pool through (its
	// tenant(tenantId:) path, an instance's tenant), "" for node(id:) and
	// payloads: the pool's connections then hold what that tenant's
	// readers read, as the methods naming that tenant do (loaders.PageKey).
	View string `json:"-" db:"-"`
}

// Seen is the pool as reached through tenant view ("" leaves it as it is):
// a copy, since the loaders share one pool between the paths to it.
func (p *Pool) Seen(view string) *Pool {
	if p == nil || view == "" || p.View == view {
		return p
	}
	c := *p
	c.View = view
	return &c
}

// ReadSize is what a pool spends of a request's read budget: its policy
// (up to MaxPolicyBytes each, answered on every read of the pool: a
// probe's 100 aliases of 40 pools answered 269 MB before pools spent it).
func (p *Pool) ReadSize() int { return len(p.PolicyText) }

func (p *Pool) fix() *Pool {
	if p.PolicyText != "" {
		p.Policy = json.RawMessage(p.PolicyText)
	} else {
		p.Policy = json.RawMessage(`{}`)
	}
	return p
}

// Quota is what an offer lets the offered-to tenant use.
type Quota struct {
	GPUs      int `json:"gpus" doc:"How many GPUs (after the pool's sharing mode) the tenant may hold in the pool at once, by its instances or its reservations."`
	Instances int `json:"instances" doc:"How many live instances the tenant may have in the pool at once."`
}

// Offer is a pool offered to another tenant.
type Offer struct {
	PoolID     string    `json:"poolId" db:"pool_id" doc:"The pool offered."`
	ToTenantID string    `json:"toTenantId" db:"to_tenant_id" doc:"The tenant the pool is offered to."`
	Quota      Quota     `json:"quota" doc:"What the tenant offered to may hold in the pool at once."`
	CreatedAt  time.Time `json:"createdAt" doc:"When the pool was offered to the tenant."`
}

// GlobalID is the offer's Relay id: its pool and the tenant offered to.
func (o *Offer) GlobalID() string { return relay.ID("PoolOffer", o.PoolID, o.ToTenantID) }

type offerRow struct {
	PoolID     string    `db:"pool_id"`
	ToTenantID string    `db:"to_tenant_id"`
	GPUs       int       `db:"quota_gpus"`
	Instances  int       `db:"quota_instances"`
	CreatedAt  time.Time `db:"created_at"`
}

// Pool states.
const (
	Active   = "active"
	Archived = "archived"
)

// Inputs.
type (
	CreateInput struct {
		TenantID        string          `json:"tenantId"`
		Name            string          `json:"name"`
		Site            string          `json:"site"`
		GPUModel        string          `json:"gpuModel"`
		SharingMode     string          `json:"sharingMode"`
		Kind            string          `json:"kind"`
		Provider        *string         `json:"provider,omitempty"`
		ProviderAccount *string         `json:"providerAccount,omitempty"`
		Policy          json.RawMessage `json:"policy,omitempty"`
	}
	RefInput struct {
		TenantID string `json:"tenantId"`
		PoolID   string `json:"poolId"`
	}
	ListInput struct {
		TenantID string `json:"tenantId"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	UpdateInput struct {
		TenantID        string          `json:"tenantId"`
		PoolID          string          `json:"poolId"`
		Name            *string         `json:"name,omitempty"`
		Policy          json.RawMessage `json:"policy,omitempty"`
		ExpectedVersion *int            `json:"expectedVersion,omitempty"`
	}
	ArchiveInput struct {
		TenantID        string `json:"tenantId"`
		PoolID          string `json:"poolId"`
		ExpectedVersion *int   `json:"expectedVersion,omitempty"`
	}
	OfferInput struct {
		TenantID   string `json:"tenantId"`
		PoolID     string `json:"poolId"`
		ToTenantID string `json:"toTenantId"`
		Quota      Quota  `json:"quota"`
	}
	UnofferInput struct {
		TenantID   string `json:"tenantId"`
		PoolID     string `json:"poolId"`
		ToTenantID string `json:"toTenantId"`
	}
	Removed struct {
		Removed int `json:"removed" doc:"How many offers were withdrawn."`
	}
)

const cols = `pool_id, tenant_id, name, site, gpu_model, sharing_mode, kind, provider, provider_account,
	policy::text AS policy, state, row_version, created_at, updated_at`

// DefaultProvider is the provider of a vps-provider pool that names none.
const DefaultProvider = "sim"

func init() { authz.Register(authz.Pool, resolve) }

// resolve is the relationship resolver of compute-pool: the owner tenant
// holds everything its role allows; a tenant the pool is offered to holds
// reads and sees nothing else (every other permission is NOT_FOUND, so an
// owner-only call by an offered tenant is refused before any rule of the
// call is applied); anyone else does not see the pool.
func resolve(ctx context.Context, q store.Q, _ *reqctx.Principal, _ string, r authz.Resource) (authz.Visibility, error) {
	var owner string
	err := q.GetContext(ctx, &owner, `SELECT CASE WHEN p.tenant_id = $2 THEN 'owner' ELSE 'offered' END FROM pools p
		WHERE p.pool_id = $1 AND `+Visible("ARRAY[$2]"), r.ID, r.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return authz.Visibility{}, nil
	}
	if err != nil {
		return authz.Visibility{}, store.Wrap(err)
	}
	if owner == "owner" {
		return authz.Visibility{Exists: true}, nil
	}
	return authz.Visibility{Exists: true, Scope: authz.ReadsOnly, Hidden: func(perm authz.Permission) bool { return !authz.ReadsOnly(perm) }}, nil
}

// Visible is the one owner-or-offered predicate over pools p: a pool is
// visible to the tenants of the text[] expression tenants when one of them
// owns it or is offered it. Every read of pools uses it: the decision
// (resolve), get, list, the graph's batches, and the instances package.
func Visible(tenants string) string {
	return `(p.tenant_id = ANY(` + tenants + `) OR EXISTS (SELECT 1 FROM pool_offers o WHERE o.pool_id = p.pool_id AND o.to_tenant_id = ANY(` + tenants + `)))`
}

func notFound(poolID string) error { return errs.E(errs.NotFound, "pool %s not found", poolID) }

// policyJSON checks a policy object and returns it as text ("" for none).
// MaxPolicyBytes bounds a pool's policy, as the client wrote it.
const MaxPolicyBytes = 64 << 10

func policyJSON(path string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	// Bounded before it is decoded, checked against its schema and stored:
	// a 680 KB policy of 340,000 numbers cost 0.6 s of CPU to create, and
	// every read of the pool (pools.list, the graph) answered all of it.
	if len(raw) > MaxPolicyBytes {
		return "", errs.Invalid(path, "%s is over %d bytes of JSON", path, MaxPolicyBytes)
	}
	// Numbers as written: 1e400 or a 400-digit integer overflowed a
	// float64 and was refused as "not an object"; the schema judges them.
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", errs.Invalid(path, "%s must be an object", path)
	}
	if _, ok := v.(map[string]any); !ok {
		return "", errs.Invalid(path, "%s must be an object", path)
	}
	if p := pgtext.FirstNUL(path, v); p != "" {
		return "", errs.Invalid(p, "%s must not contain NUL characters", p)
	}
	if err := checkPolicy(path, raw); err != nil {
		return "", err
	}
	// An integral number is stored as an integer, however it was spelled:
	// the schema takes 8.0 for an integer, and PostgreSQL's jsonb keeps it
	// "8.0", which the readers' int fields refused (the reconciler then used
	// its default, silently). The stored form is jsonb's anyway (its key
	// order, not the client's).
	b, err := json.Marshal(jsonnum.Integral(v))
	if err != nil {
		return "", errs.Invalid(path, "%s is not a valid policy", path)
	}
	return string(b), nil
}

func nameTaken(name, tenantID string) error {
	return errs.E(errs.Conflict, "pool %q already exists in tenant %s", name, tenantID).With("path", "name")
}

// Create stores a pool owned by the named tenant.
func Create(ctx context.Context, q store.Q, in *CreateInput) (*Pool, error) {
	provider := in.Provider
	if in.Kind == "vps-provider" {
		if provider == nil {
			s := DefaultProvider
			provider = &s
		}
	} else if provider != nil {
		return nil, errs.Invalid("provider", "provider is only for pools of kind vps-provider")
	}
	policy, err := policyJSON("policy", in.Policy)
	if err != nil {
		return nil, err
	}
	if policy == "" {
		policy = "{}"
	}
	var p Pool
	err = q.GetContext(ctx, &p, `INSERT INTO pools (pool_id, tenant_id, name, site, gpu_model, sharing_mode, kind, provider, provider_account, policy)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb) RETURNING `+cols,
		ids.New(ids.Pool), in.TenantID, in.Name, in.Site, in.GPUModel, in.SharingMode, in.Kind, provider, in.ProviderAccount, policy)
	if store.IsUnique(err, "pools_tenant_name_key") {
		return nil, nameTaken(in.Name, in.TenantID)
	}
	if store.IsForeignKey(err) {
		return nil, errs.E(errs.NotFound, "tenant %s not found", in.TenantID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return p.fix(), nil
}

// Get returns a pool the tenant owns or is offered (the decision has
// already checked it is visible).
func Get(ctx context.Context, q store.Q, in *RefInput) (*Pool, error) {
	var p Pool
	err := q.GetContext(ctx, &p, `SELECT `+cols+` FROM pools p WHERE pool_id = $1 AND `+Visible("ARRAY[$2]"), in.PoolID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(in.PoolID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return p.fix(), nil
}

// List pages the pools the tenant owns and those offered to it, by id,
// archived ones included (with their state).
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Pool], error) {
	var after string
	if _, err := Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows := []Pool{}
	err := store.SelectSpending(ctx, q, &rows, `SELECT `+cols+` FROM pools p
		WHERE `+Visible("ARRAY[$1]")+` AND pool_id > $2 ORDER BY pool_id LIMIT $3`, in.TenantID, after, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		rows[i].fix()
	}
	items, cur := page.Trim(rows, in.Limit, func(p Pool) string { return Cursors.Encode(p.PoolID) })
	return &page.Page[Pool]{Items: items, Cursor: cur}, nil
}

// owned locks a pool the tenant owns; anyone else's pool is NOT_FOUND.
func owned(ctx context.Context, q store.Q, tenantID, poolID string) (*Pool, error) {
	if err := authz.LockPool(ctx, q, poolID, "FOR UPDATE"); err != nil {
		return nil, err
	}
	var p Pool
	err := q.GetContext(ctx, &p, `SELECT `+cols+` FROM pools WHERE pool_id = $1 AND tenant_id = $2 FOR UPDATE`, poolID, tenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(poolID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return p.fix(), nil
}

// active is owned plus: an archived pool is INVALID_STATE; an
// expectedVersion other than the rowVersion is CONFLICT.
func active(ctx context.Context, q store.Q, tenantID, poolID string, expected *int) (*Pool, error) {
	p, err := owned(ctx, q, tenantID, poolID)
	if err != nil {
		return nil, err
	}
	if p.State != Active {
		return nil, errs.InState(p.State, "pool %s is %s", poolID, p.State)
	}
	if expected != nil && *expected != p.RowVersion {
		return nil, errs.E(errs.Conflict, "pool %s is at rowVersion %d, not %d", poolID, p.RowVersion, *expected).
			With("rowVersion", p.RowVersion)
	}
	return p, nil
}

// Update changes an active pool's name and/or policy.
func Update(ctx context.Context, q store.Q, in *UpdateInput) (*Pool, error) {
	policy, err := policyJSON("policy", in.Policy)
	if err != nil {
		return nil, err
	}
	if in.Name == nil && policy == "" {
		return nil, errs.Invalid("name", "pass name, policy or both")
	}
	cur, err := active(ctx, q, in.TenantID, in.PoolID, in.ExpectedVersion)
	if err != nil {
		return nil, err
	}
	var pol *string
	if policy != "" {
		pol = &policy
	}
	// Values equal to the pool's change nothing: no new rowVersion, so
	// another writer's expectedVersion still holds.
	var p Pool
	err = q.GetContext(ctx, &p, `UPDATE pools SET
			name = COALESCE($3, name), policy = COALESCE($4::jsonb, policy),
			row_version = row_version + 1, updated_at = now()
		WHERE pool_id = $1 AND tenant_id = $2
			AND (name IS DISTINCT FROM COALESCE($3, name) OR policy IS DISTINCT FROM COALESCE($4::jsonb, policy))
		RETURNING `+cols, in.PoolID, in.TenantID, in.Name, pol)
	if errors.Is(err, sql.ErrNoRows) {
		return cur, nil
	}
	if store.IsUnique(err, "pools_tenant_name_key") {
		return nil, nameTaken(*in.Name, in.TenantID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return p.fix(), nil
}

// accessEnds are what other packages undo, in the transaction of a change
// that ends a tenant's use of a pool (tenantID, or every tenant when ""),
// with the pool's row locked by that change. internal/instances, which
// imports this package, registers the cancel of the reservations that
// could no longer be used.
var accessEnds []func(ctx context.Context, q store.Q, poolID, tenantID string) error

// OnAccessEnd registers f with the changes that end a tenant's use of a
// pool: pools.unoffer (that tenant) and pools.archive (every tenant).
func OnAccessEnd(f func(ctx context.Context, q store.Q, poolID, tenantID string) error) {
	accessEnds = append(accessEnds, f)
}

func accessEnd(ctx context.Context, q store.Q, poolID, tenantID string) error {
	for _, f := range accessEnds {
		if err := f(ctx, q, poolID, tenantID); err != nil {
			return err
		}
	}
	return nil
}

// Archive retires an active pool; archiving an archived pool is
// INVALID_STATE. Every tenant's use of the pool ends (accessEnds).
func Archive(ctx context.Context, q store.Q, in *ArchiveInput) (*Pool, error) {
	if _, err := active(ctx, q, in.TenantID, in.PoolID, in.ExpectedVersion); err != nil {
		return nil, err
	}
	var p Pool
	err := q.GetContext(ctx, &p, `UPDATE pools SET state = 'archived', row_version = row_version + 1, updated_at = now()
		WHERE pool_id = $1 AND tenant_id = $2 RETURNING `+cols, in.PoolID, in.TenantID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	return p.fix(), accessEnd(ctx, q, in.PoolID, "")
}

const offerCols = `pool_id, to_tenant_id, quota_gpus, quota_instances, created_at`

// MakeOffer offers an active pool to another tenant with a quota; offering
// it again changes the quota.
func MakeOffer(ctx context.Context, q store.Q, in *OfferInput) (*Offer, error) {
	// Only the owner gets past this (anyone else: NOT_FOUND); then the
	// owner's rules.
	if _, err := active(ctx, q, in.TenantID, in.PoolID, nil); err != nil {
		return nil, err
	}
	if in.ToTenantID == in.TenantID {
		return nil, errs.Invalid("toTenantId", "a pool cannot be offered to its owner")
	}
	if in.ToTenantID == authz.BuiltinTenant {
		return nil, errs.Invalid("toTenantId", "the builtin tenant is reserved")
	}
	var o offerRow
	err := q.GetContext(ctx, &o, `INSERT INTO pool_offers (pool_id, to_tenant_id, quota_gpus, quota_instances)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (pool_id, to_tenant_id) DO UPDATE SET
			quota_gpus = EXCLUDED.quota_gpus, quota_instances = EXCLUDED.quota_instances, updated_at = now()
		RETURNING `+offerCols, in.PoolID, in.ToTenantID, in.Quota.GPUs, in.Quota.Instances)
	if store.IsForeignKey(err) {
		return nil, errs.E(errs.NotFound, "tenant %s not found", in.ToTenantID).With("path", "toTenantId")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &Offer{PoolID: o.PoolID, ToTenantID: o.ToTenantID, Quota: Quota{GPUs: o.GPUs, Instances: o.Instances}, CreatedAt: o.CreatedAt}, nil
}

// Unoffer withdraws an offer; NOT_FOUND when there is none.
func Unoffer(ctx context.Context, q store.Q, in *UnofferInput) (*Removed, error) {
	if _, err := owned(ctx, q, in.TenantID, in.PoolID); err != nil {
		return nil, err
	}
	res, err := q.ExecContext(ctx, `DELETE FROM pool_offers WHERE pool_id = $1 AND to_tenant_id = $2`, in.PoolID, in.ToTenantID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return nil, errs.E(errs.NotFound, "pool %s is not offered to tenant %s", in.PoolID, in.ToTenantID)
	}
	return &Removed{Removed: int(n)}, accessEnd(ctx, q, in.PoolID, in.ToTenantID)
}

// Group describes the pools group.
var Group = registry.Group{Name: "pools", Summary: "A pool groups the nodes of one site under one GPU model, one sharing mode and one policy, and every reservation and quota belongs to exactly one pool. The tenant that creates a pool owns it; other tenants see it only once the owner offers it to them with a quota. Only the owner can offer, unoffer, update or archive a pool; anyone else gets `NOT_FOUND`."}

// Methods are the pools group's registry entries.
func Methods() []registry.Method {
	m := func(name string, kind registry.Kind, perm authz.Permission, res, summary string, notes []string, in ...registry.Field) registry.Method {
		return registry.Method{Group: "pools", Name: name, Kind: kind, Permission: perm, Resource: res,
			Summary: summary, Notes: notes, Module: "capacity", Phase: "v0.2", Input: in}
	}
	ref := func(more ...registry.Field) []registry.Field {
		return append([]registry.Field{registry.TenantID(), registry.ID("poolId", ids.Pool)}, more...)
	}
	text := func(name string, required bool, desc string) registry.Field {
		return registry.Field{Name: name, Type: registry.String, Required: required, MaxLength: 128, Pattern: registry.NamePattern,
			Description: desc}
	}
	policy := registry.Field{Name: "policy", Type: registry.Object, Open: true, Schema: PolicySchema, MaxBytes: MaxPolicyBytes,
		Description: fmt.Sprintf("free-form policy object of at most %d bytes of JSON (over GraphQL, as the server writes the variable out again); {} when omitted", MaxPolicyBytes)}
	expected := registry.ExpectedVersion()
	toTenant := registry.TenantID()
	toTenant.Name, toTenant.Description = "toTenantId", "the tenant the pool is offered to"
	count := func(name string) registry.Field {
		return registry.Field{Name: name, Type: registry.Integer, Required: true, Min: registry.Int(0), Max: registry.Int(1000000)}
	}
	quota := registry.Field{Name: "quota", Type: registry.Object, Required: true, Description: "what the tenant's live instances in the pool may hold at once",
		Fields: []registry.Field{count("gpus"), count("instances")}}
	ownerOnly := "Only the owner may call it; a pool the tenant does not own is `NOT_FOUND`."
	list := m("list", registry.Read, authz.PoolsRead, authz.Tenant,
		"Returns a page of the pools the tenant owns and those offered to it, ordered by id.",
		[]string{"Archived pools are included, with their `state`.",
			"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
		registry.TenantID(), registry.PageLimit(), registry.Cursor())
	list.Items = true
	return []registry.Method{
		registry.Def(m("create", registry.Mutation, authz.PoolsManage, authz.Tenant,
			"Creates a pool owned by the tenant.",
			[]string{"`provider` is only for pools of kind `vps-provider` (default `sim`); passing it for another kind is `INVALID_INPUT`.",
				"`CONFLICT` when the tenant already has a pool of that name."},
			registry.TenantID(), registry.Name(true),
			text("site", true, "the site the pool's nodes are in"),
			text("gpuModel", true, "the GPU model of the pool's nodes"),
			registry.EnumField("sharingMode", SharingModeEnum, true),
			registry.EnumField("kind", KindEnum, true),
			registry.Field{Name: "provider", Type: registry.String, MaxLength: 63, Pattern: `^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`,
				Description: "the VPS provider (vps-provider pools only); default sim"},
			text("providerAccount", false, "the account at the provider"),
			policy), nil, Create),
		registry.Def(m("get", registry.Read, authz.PoolsRead, authz.Pool,
			"Returns one pool the tenant owns or is offered.",
			[]string{"`NOT_FOUND` when the tenant neither owns the pool nor is offered it."}, ref()...), nil, Get),
		registry.Def(list, nil, List),
		registry.Def(m("update", registry.Mutation, authz.PoolsManage, authz.Pool,
			"Changes a pool's name or policy and returns it.",
			[]string{"Pass `name`, `policy` or both; neither is `INVALID_INPUT`.",
				"`expectedVersion` is the pool's rowVersion; a mismatch is `CONFLICT`.",
				"An archived pool is `INVALID_STATE`.", ownerOnly,
				"Values equal to the pool's change nothing: the pool comes back with the same `rowVersion`."},
			ref(registry.Name(false), policy, expected)...), nil, Update),
		registry.Def(m("archive", registry.Mutation, authz.PoolsManage, authz.Pool,
			"Archives a pool and returns it; an archived pool takes no new offers or changes.",
			[]string{"Archiving an archived pool is `INVALID_STATE`. Instances that run or are stopped stay; instances still `pending` (waiting for room) fail, saying the pool was archived; every tenant's reservations in the pool that have not ended are canceled (`reservation.canceled`), since no instance could use them.",
				"Withdrawing an offer (`pools.unoffer`) still works on an archived pool: it takes access away, and gives none.",
				"`expectedVersion` is the pool's rowVersion; a mismatch is `CONFLICT`.", ownerOnly},
			ref(expected)...), nil, Archive),
		registry.Def(m("offer", registry.Mutation, authz.PoolsManage, authz.Pool,
			"Offers a pool to another tenant with a quota and returns the offer.",
			[]string{"Offering a pool that is already offered to the tenant changes the quota.",
				"Offering to the owner itself is `INVALID_INPUT`; an unknown `toTenantId` is `NOT_FOUND`.",
				"An archived pool is `INVALID_STATE`.", ownerOnly},
			ref(toTenant, quota)...), nil, MakeOffer),
		registry.Def(m("unoffer", registry.Mutation, authz.PoolsManage, authz.Pool,
			"Withdraws an offer and returns the number removed.",
			[]string{"`NOT_FOUND` when the pool is not offered to that tenant.",
				"The tenant's instances that run or are stopped stay; its instances still `pending` fail, saying the pool is no longer offered, and its reservations in the pool that have not ended are canceled (`reservation.canceled`), freeing their room. Lowering an offer's quota (`pools.offer` again) keeps what is placed, and a pending instance waits until it fits.", ownerOnly},
			ref(toTenant)...), nil, Unoffer),
	}
}

var visibleTo = Visible("ARRAY[t.parent]")

// PagesByTenant returns one page of each tenant's visible pools (owned or
// offered to it) in one statement.
func PagesByTenant(ctx context.Context, q store.Q, tenantIDs []string, after string, limit int) (page.Rows[Pool], error) {
	var r page.Rows[Pool]
	parents, arg := page.Parents(tenantIDs)
	// Scanned column by column (the order of cols), not by sqlx's
	// reflection, and by pgx itself when q is the pool: this is the
	// statement of every tenant's pools page.
	err := store.EachRow(ctx, q, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM pools p WHERE `+visibleTo+`) AS total_count
			FROM `+parents+`)
		SELECT t.parent AS parent_key, t.total_count,
		       x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+cols+` FROM pools p WHERE `+visibleTo+` AND p.pool_id > $2 ORDER BY p.pool_id LIMIT $3
		) x`, []any{arg, after, limit + 1}, func(scan func(dest ...any) error) error {
		var parent string
		var total int
		var p Pool
		if err := scan(&parent, &total, &p.PoolID, &p.TenantID, &p.Name, &p.Site, &p.GPUModel, &p.SharingMode, &p.Kind,
			&p.Provider, &p.ProviderAccount, &p.PolicyText, &p.State, &p.RowVersion, &p.CreatedAt, &p.UpdatedAt); err != nil {
			return err
		}
		if err := store.Spend(ctx, p.ReadSize()); err != nil {
			return err
		}
		p.fix()
		r.Parents, r.Totals, r.Items = append(r.Parents, parent), append(r.Totals, total), append(r.Items, p)
		return nil
	})
	if err != nil {
		return page.Rows[Pool]{}, store.Wrap(err)
	}
	return r, nil
}

// CountByTenant counts each tenant's visible pools.
func CountByTenant(ctx context.Context, q store.Q, tenantIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k, (SELECT count(*) FROM pools p WHERE `+visibleTo+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, tenantIDs)
}

type poolOfferRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	offerRow
}

// OfferPagesByPool returns one page of each pool's offers, by the tenant
// offered to, in the owner's view (tenants the pool is offered to see
// none, as they see none of its other tenants).
func OfferPagesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[Offer], error) {
	var rows []poolOfferRow
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM pool_offers o WHERE o.pool_id = t.parent) AS total_count
			FROM unnest($1::text[]) AS t(parent)
			WHERE t.parent IN (SELECT p.pool_id FROM pools p WHERE p.pool_id = ANY($1) AND `+authz.Where("$4", ownerIn)+`))
		SELECT t.parent AS parent_key, t.total_count, x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+offerCols+` FROM pool_offers o WHERE o.pool_id = t.parent AND o.to_tenant_id > $2
			ORDER BY o.to_tenant_id LIMIT $3
		) x`, poolIDs, after, limit+1, scope.Arg())
	var r page.Rows[Offer]
	for _, x := range rows {
		r.Parents, r.Totals = append(r.Parents, x.Parent), append(r.Totals, x.Total)
		r.Items = append(r.Items, Offer{PoolID: x.PoolID, ToTenantID: x.ToTenantID, Quota: Quota{GPUs: x.GPUs, Instances: x.Instances}, CreatedAt: x.CreatedAt})
	}
	return r, store.Wrap(err)
}

// OffersByKey loads the offers of keys (relay keys: pool id, tenant
// offered to) in the owner's view, in one statement.
func OffersByKey(ctx context.Context, q store.Q, scope authz.Scope, keys [][2]string) (map[[2]string]*Offer, error) {
	pools, tos := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		pools[i], tos[i] = k[0], k[1]
	}
	var rows []offerRow
	if err := q.SelectContext(ctx, &rows, `SELECT `+offerCols+` FROM pool_offers o
		WHERE (o.pool_id, o.to_tenant_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		  AND o.pool_id IN (SELECT p.pool_id FROM pools p WHERE p.pool_id = ANY($1) AND `+authz.Where("$3", ownerIn)+`)`, pools, tos, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[[2]string]*Offer, len(rows))
	for _, r := range rows {
		out[[2]string{r.PoolID, r.ToTenantID}] = &Offer{PoolID: r.PoolID, ToTenantID: r.ToTenantID, Quota: Quota{GPUs: r.GPUs, Instances: r.Instances}, CreatedAt: r.CreatedAt}
	}
	return out, nil
}

// CountOffersByPool counts each pool's offers in the owner's view.
func CountOffersByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k, (SELECT count(*) FROM pool_offers o WHERE o.pool_id = t.parent) AS n
		FROM unnest($1::text[]) AS t(parent)
		WHERE t.parent IN (SELECT p.pool_id FROM pools p WHERE p.pool_id = ANY($1) AND `+authz.Where("$2", ownerIn)+`)`, poolIDs, scope.Arg())
}

// ownerIn is the owner's-view predicate over pools p.
func ownerIn(tenants string) string { return `p.tenant_id = ANY(` + tenants + `)` }

// ByIDs loads the pools of ids visible in scope (compute:pools:read: owned
// or offered) in one statement, keyed by id.
func ByIDs(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]*Pool, error) {
	var rows []Pool
	if err := store.SelectSpending(ctx, q, &rows, `SELECT `+cols+` FROM pools p WHERE pool_id = ANY($1) AND `+authz.Where("$2", Visible), poolIDs, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*Pool, len(rows))
	for i := range rows {
		out[rows[i].PoolID] = rows[i].fix()
	}
	return out, nil
}
