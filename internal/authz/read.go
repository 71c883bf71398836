package authz

import (
	"fmt"

	"context"
	"github.com/bettercompute/computed/internal/errs"
	"slices"

	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// The read path. A graph read is decided where its rows are loaded: a
// loader receives the Caller (the principal and its role bindings, loaded
// once per request), turns it into a Scope for the permission the resource
// type is read under, and the domain package's batch SQL joins that scope
// into its WHERE clause through the resource type's one visibility
// predicate (pools.visible, nodes.visible, profiles.visible, ...). The
// method surface's get and list use the same predicates with the one tenant
// their decision named (TenantScope). A row the caller may not read is never
// returned, so no resolver can forget the decision.

// Caller is who a read is for.
type Caller struct {
	P     *reqctx.Principal
	roles map[string]string // tenant -> role; nil for the operator and nodes
}

// LoadCaller loads the principal's role bindings (one statement, or none
// when the request has them already).
func LoadCaller(ctx context.Context, q store.Q, p *reqctx.Principal) (*Caller, error) {
	c := &Caller{P: p}
	if p == nil || p.IsOperator() || p.Kind == "node" {
		return c, nil
	}
	roles, ok := p.AllRoles()
	if !ok {
		var rows []struct {
			TenantID string `db:"tenant_id"`
			Role     string `db:"role"`
		}
		if err := q.SelectContext(ctx, &rows, `SELECT tenant_id, role FROM role_bindings WHERE principal_id = $1`, p.ID); err != nil {
			return nil, store.Wrap(err)
		}
		roles = make(map[string]string, len(rows))
		for _, r := range rows {
			roles[r.TenantID] = r.Role
		}
		p.CacheAllRoles(roles)
	}
	c.roles = roles
	return c, nil
}

// PrincipalID is the caller's principal id ("" for none).
func (c *Caller) PrincipalID() string {
	if c == nil || c.P == nil {
		return ""
	}
	return c.P.ID
}

// Allows says whether the caller holds perm on the tenant itself: the
// decision of a tenant's own fields (its projects, tokens, pools).
func (c *Caller) Allows(perm Permission, tenantID string) bool {
	if c == nil || c.P == nil || !known[perm] {
		return false
	}
	return TenantGrants(c.P, c.roles[tenantID], perm, tenantID)
}

// Scope is the set of tenants in which the caller holds perm, a read (the
// graph's loaders read in it).
func (c *Caller) Scope(perm Permission) Scope {
	switch {
	case c == nil || c.P == nil || c.P.Kind == "node" || !known[perm]:
		return Scope{tenants: []string{}, none: true}
	case c.P.IsOperator():
		return Scope{all: true, principal: c.P.ID}
	}
	// The tenants where TenantGrants holds: the builtin tenant's rule needs
	// no binding, the others' rest on one.
	s := Scope{tenants: []string{}, principal: c.P.ID}
	if TenantGrants(c.P, "", perm, BuiltinTenant) {
		s.tenants = append(s.tenants, BuiltinTenant)
	}
	for t, role := range c.roles {
		if t != BuiltinTenant && TenantGrants(c.P, role, perm, t) {
			s.tenants = append(s.tenants, t)
		}
	}
	slices.Sort(s.tenants)
	return s
}

// Scope is a set of tenants a read may return resources of: every tenant
// (the operator) or a list; and the principal, for resource types that
// grant reads through direct relationships (a project's members). The zero
// Scope holds no tenant: a scope forgotten or left unset fails closed (SQL
// bound to it reads only what no tenant owns, such as public profiles, and
// loaders read nothing for it: Nothing).
type Scope struct {
	all       bool
	none      bool // reads nothing at all, not even what is public
	tenants   []string
	principal string
}

// Nothing says the scope reads nothing, public resources included (a node
// credential, which reads nothing but reports): loaders answer without a
// statement.
func (s Scope) Nothing() bool { return s.none || (!s.all && s.tenants == nil) }

// Principal is the principal the scope reads for ("" on the method
// surface, whose decision has already looked at direct relationships).
func (s Scope) Principal() string { return s.principal }

// TenantScope is the scope of a method-surface read, decided on one tenant.
func TenantScope(tenantID string) Scope { return Scope{tenants: []string{tenantID}} }

// Within narrows the scope to one tenant, the one a graph object was
// reached through (a pool under tenant(tenantId:)): what the scope reads of
// that tenant and nothing of the others, as a method call naming that
// tenant reads; "" leaves the scope whole. A principal with roles in two
// tenants read one tenant's pool and saw, under the other tenant's path,
// the first one's nodes, tokens and instances.
func (s Scope) Within(tenantID string) Scope {
	switch {
	case tenantID == "":
		return s
	case s.none || !s.Has(tenantID):
		return Scope{tenants: []string{}, none: true}
	}
	return Scope{tenants: []string{tenantID}, principal: s.principal}
}

// Has says whether the scope holds the tenant.
func (s Scope) Has(tenantID string) bool { return s.all || slices.Contains(s.tenants, tenantID) }

// Arg is the scope as an SQL parameter: NULL for every tenant, else a
// text[] of tenant ids (empty for the zero Scope: a nil slice would bind
// as NULL, every tenant). Bind it where Where says.
func (s Scope) Arg() any {
	if s.all {
		return nil
	}
	if s.tenants == nil {
		return []string{}
	}
	return s.tenants
}

// Where renders a visibility predicate over a scope bound to the SQL
// parameter param ("$2"): pred receives the text[] expression of the
// scope's tenants and returns the resource type's predicate; every tenant
// (a NULL scope) passes. A NULL scope skips pred whole, so pred says only
// which tenants read a row: a condition every reader is under (not
// deleted, of one resource type) goes outside Where, or the operator
// reads past it.
func Where(param string, pred func(tenants string) string) string {
	t := param + "::text[]"
	return "(" + t + " IS NULL OR " + pred(t) + ")"
}

// Check is Allows as a decision: nil, or PERMISSION_DENIED as Decide words
// it (UNAUTHENTICATED without a principal).
func (c *Caller) Check(perm Permission, tenantID string) error {
	if c == nil || c.P == nil {
		return errs.E(errs.Unauthenticated, "a bearer token is required")
	}
	if !known[perm] {
		return fmt.Errorf("authz: unknown permission %q", perm)
	}
	if c.Allows(perm, tenantID) {
		return nil
	}
	return denied(perm, Resource{Type: Tenant, TenantID: tenantID})
}
