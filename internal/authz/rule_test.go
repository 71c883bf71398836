package authz_test

import (
	"context"
	"testing"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The method surface (Decide) and the graph (Caller.Allows, Caller.Scope)
// decide a tenant's own reads and writes with one rule: over every kind of
// principal, role, permission and tenant (the builtin one included) the
// three answer alike. A node credential holds nothing on any tenant, the
// builtin one included (the contract: it reports its own inventory and
// nothing else).
func TestTenantRuleIsOneOnBothSurfaces(t *testing.T) {
	ctx := context.Background()
	db := pgtest.DB(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme')`); err != nil {
		t.Fatal(err)
	}
	perms := authz.KnownPermissions()
	tenants := []string{"acme", authz.BuiltinTenant}
	for _, kind := range []string{"user", "service", "node", "operator"} {
		for _, role := range append([]string{""}, authz.Roles...) {
			p := &reqctx.Principal{ID: "p", Kind: kind}
			roles := map[string]string{}
			if role != "" && kind != "node" && kind != "operator" {
				roles["acme"] = role
			}
			p.CacheAllRoles(roles)
			c, err := authz.LoadCaller(ctx, db, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, perm := range perms {
				for _, tenant := range tenants {
					decided := authz.Decide(ctx, db, p, perm, authz.Resource{Type: authz.Tenant, TenantID: tenant}) == nil
					if allows := c.Allows(perm, tenant); allows != decided {
						t.Errorf("%s/%q %s on %s: Decide %v, Caller.Allows %v", kind, role, perm, tenant, decided, allows)
					}
					if scoped := c.Scope(perm).Has(tenant); perm.IsRead() && scoped != decided {
						t.Errorf("%s/%q %s on %s: Decide %v, Caller.Scope %v", kind, role, perm, tenant, decided, scoped)
					}
					if kind == "node" && decided {
						t.Errorf("a node credential holds %s on %s", perm, tenant)
					}
				}
			}
		}
	}
	// A tenant that does not exist: the operator's decision says so (the
	// graph's Caller allows it and then finds no tenant); nobody else holds a
	// binding to it.
	op := &reqctx.Principal{ID: "op", Kind: "operator"}
	err := authz.Decide(ctx, db, op, authz.PoolsRead, authz.Resource{Type: authz.Tenant, TenantID: "ghost"})
	if errs.CodeOf(err) != errs.NotFound {
		t.Fatalf("the operator on a tenant that does not exist: %v", err)
	}
}
