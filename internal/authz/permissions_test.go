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
