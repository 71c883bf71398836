package authz

import (
	"context"
	"testing"

	"github.com/bettercompute/computed/internal/reqctx"
)

// The role table used to grant any string matching compute:*:read, so a
// misspelled read permission was silently allowed. Now only declared
// permissions exist.
func TestUnknownPermissionsAreNeverAllowed(t *testing.T) {
	for _, role := range Roles {
		if RoleAllows(role, "compute:pool:read") || RoleAllows(role, "compute:anything:read") {
			t.Fatalf("%s allows an undeclared read", role)
		}
	}
	op := &reqctx.Principal{ID: "op", Kind: "operator"}
	if err := Decide(context.Background(), nil, op, "compute:pool:read", Resource{Type: Platform}); err == nil {
		t.Fatal("Decide allowed an unknown permission to the operator")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("CheckKnown did not panic on an unknown permission")
		}
	}()
	CheckKnown("compute:pool:read", "test")
}

func TestRoleTable(t *testing.T) {
	for _, p := range reads {
		for _, role := range Roles {
			if !RoleAllows(role, p) {
				t.Errorf("%s does not hold %s", role, p)
			}
		}
		if !p.IsRead() {
			t.Errorf("%s is not a read", p)
		}
	}
	if RoleAllows(RoleViewer, ProfilesManage) || !RoleAllows(RoleMember, ProfilesManage) || RoleAllows(RoleMember, PoolsManage) || !RoleAllows(RoleAdmin, IAMManage) {
		t.Fatal("the role table differs from the contract's")
	}
	if RoleAllows("", PoolsRead) {
		t.Fatal("no role allows a read")
	}
	// The audit trail is an admin's read (the contract, section 8).
	if !AuditRead.IsRead() || RoleAllows(RoleViewer, AuditRead) || RoleAllows(RoleMember, AuditRead) || !RoleAllows(RoleAdmin, AuditRead) {
		t.Fatal("compute:audit:read is not the admins' read alone")
	}
}

// The method surface (Decide) and the graph (Caller.Allows, Caller.Scope)
// decide a tenant's own reads and writes with one rule: over every kind of
// principal, role, permission and tenant (the builtin one included) the
// three answer alike. A node credential holds nothing on any tenant, the
// builtin one included (the contract: it reports its own inventory and
// nothing else).
func TestTenantRuleIsOneOnBothSurfaces(t *testing.T) {
	perms := make([]Permission, 0, len(known))
	for p := range known {
		perms = append(perms, p)
	}
	tenants := []string{"acme", BuiltinTenant}
	for _, kind := range []string{"user", "service", "node", "operator"} {
		for _, role := range append([]string{""}, Roles...) {
			p := &reqctx.Principal{ID: "p", Kind: kind}
			roles := map[string]string{}
			if role != "" && kind != "node" && kind != "operator" {
				roles["acme"] = role
			}
			p.CacheAllRoles(roles)
			c, err := LoadCaller(context.Background(), nil, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, perm := range perms {
				for _, tenant := range tenants {
					decided := Decide(context.Background(), nil, p, perm, Resource{Type: Tenant, TenantID: tenant}) == nil
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
}
