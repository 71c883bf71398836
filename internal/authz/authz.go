// Package authz holds the one decision every method and resolver uses:
// Decide(principal, permission, resource). Decisions come from relationships
// stored in PostgreSQL (role bindings on tenants, and per-resource relations
// that domain packages resolve), mapped to permissions by the tables below.
package authz

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Resource types.
const (
	Platform = "platform" // the whole service: tenants.create, tenants.list
	Tenant   = "compute-tenant"
	Profile  = "compute-profile"
	Pool     = "compute-pool"
	Node     = "compute-node"
	Project  = "compute-project"
	Instance = "compute-instance"
)

// BuiltinTenant is reserved: it holds the read-only profiles modules ship.
const BuiltinTenant = "builtin"

// PlatformTenant names the audit records of no tenant (audit.PlatformTenant):
// not a tenant, but the operator reads it as one.
const PlatformTenant = "@platform"

// Resource names one thing a decision is about.
type Resource struct {
	Type     string
	TenantID string // the tenant the caller names
	ID       string // the resource's own id (empty for tenants)
	// Label names what the caller asked for when it is not the resource
	// itself (a join request decided on its pool), for NOT_FOUND messages.
	Label string
}

func (r Resource) String() string {
	switch r.Type {
	case Platform:
		return "platform"
	case Tenant:
		return Tenant + "/" + r.TenantID
	case Profile:
		return Profile + "/" + r.TenantID + "/" + r.ID
	default:
		return r.Type + "/" + r.ID
	}
}

// The roles a principal can hold on a tenant.
const (
	RoleViewer = "viewer"
	RoleMember = "member"
	RoleAdmin  = "admin"
)

// Roles are the roles a principal can hold on a tenant.
var Roles = []string{RoleViewer, RoleMember, RoleAdmin}

// Visibility is what a resolver says about one resource for one caller.
type Visibility struct {
	// Exists is false when the resource does not exist or the named tenant
	// cannot see it.
	Exists bool
	// Scope limits what the tenant's role grants on the resource: "" grants
	// everything the role allows (the tenant owns it); otherwise Scope is a
	// predicate on permissions (an offered pool grants reads only).
	Scope func(perm Permission) bool
	// Direct are permissions the principal holds on the resource itself,
	// whatever its role (a project owner, a node's own credential).
	Direct []Permission
	// Hidden says for which permissions the resource is, to this caller, as
	// if it did not exist (NOT_FOUND): a pool offered to the tenant can be
	// read, but only its owner may manage it, and a manage call by anyone
	// else must not learn more than a call on a pool that does not exist.
	Hidden func(perm Permission) bool
}

// Resolver resolves a resource type's relationships in the database.
type Resolver func(ctx context.Context, q store.Q, p *reqctx.Principal, role string, r Resource) (Visibility, error)

var (
	mu        sync.RWMutex
	resolvers = map[string]Resolver{}
)

// Register installs the resolver of a resource type; domain packages call it
// from init.
func Register(resourceType string, r Resolver) {
	mu.Lock()
	defer mu.Unlock()
	resolvers[resourceType] = r
}

type lockKey struct{}

// DecideInTx is Decide for a mutation, inside its transaction tx: the role
// binding it rests on is held (HoldAuthority), then read anew and locked
// FOR SHARE, until the transaction ends, so a revocation cannot land
// between the decision and the write (it waits for the write, or the write
// sees it). The resource
// resolvers read on tx too, and the handlers lock the rows they change.
func DecideInTx(ctx context.Context, tx store.Q, p *reqctx.Principal, perm Permission, r Resource) error {
	return Decide(context.WithValue(ctx, lockKey{}, true), tx, p, perm, r)
}

// Locking says the decision runs inside a mutation's transaction
// (DecideInTx): resource resolvers lock, FOR SHARE, the relationship rows
// their answer rests on.
func Locking(ctx context.Context) bool {
	locked, _ := ctx.Value(lockKey{}).(bool)
	return locked
}

// An Authority is what a mutation's decision rests on and another call
// changes: a role binding, a project's relations, a pool's settings, a
// node's state.
type Authority string

// bindingAuthority begins every role binding's authority (Binding).
const bindingAuthority = "binding:"

// Binding is the authority of a principal's role on a tenant.
func Binding(tenantID, principalID string) Authority {
	return Authority(bindingAuthority + principalID + "@" + tenantID)
}

// ProjectRelations is the authority of every relation to a project.
func ProjectRelations(projectID string) Authority { return Authority("project:" + projectID) }

// PoolSettings is the authority of what a pool's owner sets and others
// decide on: its state, policy and capacity, its offers, its expected
// machines and allowed keys. Joins and creates hold it while they decide
// (with the pool's row share-locked); the owner's changes, and
// reservations, which decide one at a time under the pool's update lock,
// take it exclusively. Placements lock the pool's row alone (lockPool in
// internal/instances says why).
func PoolSettings(poolID string) Authority { return Authority("pool:" + poolID) }

// NodeState is the authority of a node's state (ready, cordoned, removed):
// workflows.create holds it while it decides (with the node's row
// share-locked), and the node's changes (lockNode) take it exclusively.
func NodeState(nodeID string) Authority { return Authority("node:" + nodeID) }

// LockPool holds the pool's settings for a row lock of the pool of mode
// ("FOR SHARE…" holds them, "FOR UPDATE…" changes them, "" neither),
// before the statement that takes the row lock.
func LockPool(ctx context.Context, q store.Q, poolID, mode string) error {
	switch {
	case strings.HasPrefix(mode, "FOR SHARE"):
		return HoldAuthority(ctx, q, PoolSettings(poolID))
	case strings.HasPrefix(mode, "FOR UPDATE"):
		return ChangingAuthority(ctx, q, PoolSettings(poolID))
	}
	return nil
}

// HoldAuthority holds a, in a mutation's transaction, until it ends: a
// change of a (ChangingAuthority) waits for it, and a hold that comes
// while a change waits or runs waits for the change, then reads what it
// left. It goes before the read of a, in a statement of its own (the
// read's snapshot is taken after the wait). Migration 00020 says why a
// transaction advisory lock rather than the row's share lock alone: a
// stream of share locks kept a revocation waiting until it timed out.
func HoldAuthority(ctx context.Context, q store.Q, a Authority) error {
	_, err := q.ExecContext(ctx, `SELECT authority_held($1)`, string(a))
	return store.Wrap(err)
}

// ChangingAuthority takes a exclusively before a change of it (a role
// binding granted or revoked, a project's relation added or removed, the
// project deleted): it waits for the mutations holding it, and the ones
// that come after wait for it.
//
// A change of a role binding is noted (store.NoteAuthority): once it
// commits, every replica checks its open sockets' bindings again at once.
func ChangingAuthority(ctx context.Context, q store.Q, a Authority) error {
	if _, err := q.ExecContext(ctx, `SELECT authority_changing($1)`, string(a)); err != nil {
		return store.Wrap(err)
	}
	if strings.HasPrefix(string(a), bindingAuthority) {
		store.NoteAuthority(q)
	}
	return nil
}

// holdsBindings says whether p can hold a role on the tenant (node
// principals hold none).
func holdsBindings(p *reqctx.Principal, tenantID string) bool {
	return p != nil && p.Kind != "node" && tenantID != ""
}

// HoldBinding holds p's role binding on the tenant (HoldAuthority), as a
// mutation's decision does before it reads the role; a principal that
// holds no bindings holds nothing. A call that must take another authority
// before its decision (a change of a project's relations, in its locate)
// holds the binding first, so that every transaction takes them in one
// order: the binding, then the rest.
func HoldBinding(ctx context.Context, q store.Q, p *reqctx.Principal, tenantID string) error {
	if !holdsBindings(p, tenantID) {
		return nil
	}
	return HoldAuthority(ctx, q, Binding(tenantID, p.ID))
}

// RoleOf returns the principal's role on a tenant, "" for none.
func RoleOf(ctx context.Context, q store.Q, p *reqctx.Principal, tenantID string) (string, error) {
	if !holdsBindings(p, tenantID) {
		return "", nil
	}
	if Locking(ctx) {
		if err := HoldBinding(ctx, q, p, tenantID); err != nil {
			return "", err
		}
		var role string
		err := q.GetContext(ctx, &role, `SELECT role FROM role_bindings WHERE tenant_id = $1 AND principal_id = $2 FOR SHARE`, tenantID, p.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil
		}
		return role, store.Wrap(err)
	}
	if r, ok := p.CachedRole(tenantID); ok {
		return r, nil
	}
	// One statement loads every binding of the principal, so a request that
	// touches many tenants decides them all from memory.
	var rows []struct {
		TenantID string `db:"tenant_id"`
		Role     string `db:"role"`
	}
	if err := q.SelectContext(ctx, &rows, `SELECT tenant_id, role FROM role_bindings WHERE principal_id = $1 LIMIT 1001`, p.ID); err != nil {
		return "", store.Wrap(err)
	}
	if len(rows) > 1000 {
		// A principal bound to very many tenants: look this one up alone.
		var role string
		err := q.GetContext(ctx, &role, `SELECT role FROM role_bindings WHERE tenant_id = $1 AND principal_id = $2`, tenantID, p.ID)
		if errors.Is(err, sql.ErrNoRows) {
			role, err = "", nil
		}
		if err != nil {
			return "", store.Wrap(err)
		}
		p.CacheRole(tenantID, role)
		return role, nil
	}
	roles := make(map[string]string, len(rows))
	for _, r := range rows {
		roles[r.TenantID] = r.Role
	}
	p.CacheAllRoles(roles)
	return roles[tenantID], nil
}

// Decide says whether p may perform perm on r. It returns nil (allowed),
// UNAUTHENTICATED, PERMISSION_DENIED or NOT_FOUND, following the contract:
// no permission on the named tenant is PERMISSION_DENIED whether or not the
// tenant exists; a resource the tenant cannot see is NOT_FOUND.
func Decide(ctx context.Context, q store.Q, p *reqctx.Principal, perm Permission, r Resource) error {
	if p == nil {
		return errs.E(errs.Unauthenticated, "a bearer token is required")
	}
	if !known[perm] {
		// A bug, refused whatever the caller holds.
		return fmt.Errorf("authz: unknown permission %q", perm)
	}
	write := !perm.IsRead()
	if r.TenantID == BuiltinTenant && write {
		return errs.E(errs.PermissionDenied, "the builtin tenant is read-only")
	}
	if r.Type == Platform {
		if p.IsOperator() || (perm == TenantsRead && p.Kind != "node") {
			return nil
		}
		return denied(perm, r)
	}
	var role string
	if !p.IsOperator() {
		var err error
		if role, err = RoleOf(ctx, q, p, r.TenantID); err != nil {
			return err
		}
	}
	if r.Type == Tenant {
		if !TenantGrants(p, role, perm, r.TenantID) {
			return denied(perm, r)
		}
		if p.IsOperator() {
			// Anyone else holds a binding to the tenant, so it exists; the
			// operator holds none, and a list of a tenant that does not exist
			// is NOT_FOUND, not an empty page (tenants are never deleted).
			return tenantExists(ctx, q, r.TenantID)
		}
		return nil
	}
	if p.IsOperator() && r.TenantID != "" {
		// The same rule for a resource inside the tenant: a builtin or
		// public profile is visible from any tenant, and the operator
		// naming one that does not exist got it (profiles.get, validate,
		// render) where profiles.list and the graph answered NOT_FOUND.
		if err := tenantExists(ctx, q, r.TenantID); err != nil {
			return err
		}
	}
	return decideResource(ctx, q, p, effectiveRole(p, role, perm, r.TenantID), perm, r)
}

// decideResource is Decide on a resource inside a tenant (a pool, a node,
// a profile...): its type's resolver says whether the caller holding role
// sees it and what it grants directly; a resource the caller cannot see
// is NOT_FOUND, one it sees without the permission PERMISSION_DENIED.
func decideResource(ctx context.Context, q store.Q, p *reqctx.Principal, role string, perm Permission, r Resource) error {
	mu.RLock()
	resolve, ok := resolvers[r.Type]
	mu.RUnlock()
	if !ok {
		return fmt.Errorf("authz: no resolver for %s", r.Type)
	}
	v, err := resolve(ctx, q, p, role, r)
	if err != nil {
		return err
	}
	if role == "" && len(v.Direct) == 0 {
		return denied(perm, Resource{Type: Tenant, TenantID: r.TenantID})
	}
	if !v.Exists || v.Hidden != nil && v.Hidden(perm) {
		if r.Label != "" {
			return errs.E(errs.NotFound, "%s not found", r.Label)
		}
		return errs.E(errs.NotFound, "%s not found", r)
	}
	if p.IsOperator() || slices.Contains(v.Direct, perm) ||
		RoleAllows(role, perm) && (v.Scope == nil || v.Scope(perm)) {
		return nil
	}
	return denied(perm, r)
}

// TenantGrants is the one tenant-level rule, used by Decide on the method
// surface and by the graph's Caller (Allows, Scope): whether p, holding role
// on tenantID ("" for none), may perform perm on the tenant itself. The
// operator may do anything but write the builtin tenant (and decides other
// resources as an admin); everyone reads the
// builtin tenant (it holds what modules ship) and no one writes it; anyone
// else holds what the role table grants the role. Node credentials hold
// nothing on a tenant.
func TenantGrants(p *reqctx.Principal, role string, perm Permission, tenantID string) bool {
	if p.IsOperator() {
		return known[perm] && !(tenantID == BuiltinTenant && !perm.IsRead())
	}
	return RoleAllows(effectiveRole(p, role, perm, tenantID), perm)
}

// effectiveRole is the role the tenant-level rule decides with: admin for
// the operator, viewer for reads of the builtin tenant, none for its writes
// or for a node credential.
func effectiveRole(p *reqctx.Principal, role string, perm Permission, tenantID string) string {
	switch {
	case p == nil || p.Kind == "node":
		return ""
	case tenantID == BuiltinTenant && !perm.IsRead():
		return ""
	case p.IsOperator():
		return RoleAdmin
	case tenantID == BuiltinTenant:
		return RoleViewer // everyone reads what modules ship
	}
	return role
}

func tenantExists(ctx context.Context, q store.Q, tenantID string) error {
	if tenantID == PlatformTenant {
		return nil
	}
	var ok bool
	if err := q.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, tenantID); err != nil {
		return store.Wrap(err)
	}
	if !ok {
		return errs.E(errs.NotFound, "tenant %s not found", tenantID).With("path", "tenantId")
	}
	return nil
}

func denied(perm Permission, r Resource) error {
	return denial{errs.E(errs.PermissionDenied, "permission %s denied on %s", perm, r), r}
}

// denial is a PERMISSION_DENIED that names the resource decided on; errs.As
// still finds the refusal itself.
type denial struct {
	err *errs.Error
	on  Resource
}

func (d denial) Error() string { return d.err.Error() }
func (d denial) Unwrap() error { return d.err }

// DeniedOn is the resource a PERMISSION_DENIED of Decide names: one the
// caller was shown to exist in the tenant it named (a resource another
// tenant holds, or none, is NOT_FOUND first), so its audit record may name
// it too.
func DeniedOn(err error) (Resource, bool) {
	var d denial
	if errors.As(err, &d) {
		return d.on, true
	}
	return Resource{}, false
}

// ReadsOnly is a Scope granting only read permissions.
func ReadsOnly(perm Permission) bool { return perm.IsRead() }
