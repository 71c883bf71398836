package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/testkit"
)

// Every method decided on one resource, and every tenant method that names
// a resource, answers by one rule: a caller who can read the resource but
// lacks the method's permission (a viewer of the tenant calling a member's
// method, a member calling an admin's) is PERMISSION_DENIED; a caller whose
// tenant cannot see the resource is NOT_FOUND, before any rule about the
// resource's state (an archived or bare-metal pool is INVALID_STATE only to
// those who see it). Pools keep the seed page's exception: "only the owner
// can offer, unoffer, update or archive a pool; anyone else gets NOT_FOUND",
// so a tenant the pool is offered to is NOT_FOUND for the owner's methods.
// The list of methods comes from the registry: a method decided on a
// resource with no fixture here fails the test.
func TestReadersAreDeniedAndStrangersNotFound(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")
	guest := newTenant(t, e, "guest")
	admin, member := acme.Admin.Token, acme.Member.Token
	metal := e.Pool(admin, "acme", "metal")
	nodeID, _ := e.Node(admin, "acme", metal)
	vps := vpsPool(t, e, admin, "acme", "vps", nil)
	must(t, e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": vps, "toTenantId": "guest",
		"quota": map[string]any{"gpus": 2, "instances": 2}}))
	archived := vpsPool(t, e, admin, "acme", "old", nil)
	must(t, e.Call(admin, "pools/archive", map[string]any{"tenantId": "acme", "poolId": archived}))
	jt := must(t, e.Call(admin, "joinTokens/create", map[string]any{"tenantId": "acme", "poolId": metal}))
	jtID := obj(t, jt.Body, "joinToken")["joinTokenId"]
	m := testkit.NewMachine(t)
	body := m.JoinBody(jt.Str("secret"))
	body["hardware"].(map[string]any)["systemUuid"] = "00000000-0000-0000-0000-000000000000" // deferred for approval
	jr := must(t, e.Call("", "nodes/join", body)).Str("joinRequestId")
	machine := must(t, e.Call(admin, "machines/register", map[string]any{"tenantId": "acme", "poolId": metal, "serial": "SN1"})).Str("machineId")
	owner := newToken(t, e, admin, "acme", "owner", "member") // acme's member is not the project's owner
	prj := newProject(t, e, owner.Token, "acme", "web")
	must(t, e.Call(member, "profiles/create", map[string]any{"tenantId": "acme", "document": profileDoc("base", 1)}))
	inst := must(t, e.Call(member, "instances/create", instanceIn("acme", vps, "web", 1))).Str("instanceId")
	wf := must(t, e.Call(member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": nodeID, "profileId": "base"})).Str("workflowId")
	start, end := window(time.Hour, 2*time.Hour)
	rsv := must(t, e.Call(member, "reservations/create", map[string]any{"tenantId": "acme", "poolId": vps,
		"size": map[string]any{"gpus": 1, "vcpus": 0, "memoryGiB": 0}, "startsAt": start, "endsAt": end})).Str("reservationId")
	ek := strings.Repeat("ab", 32)

	// The acme resource each method names (tenantId is set per caller).
	fx := map[string]map[string]any{
		"projects.get":           {"projectId": prj},
		"projects.update":        {"projectId": prj, "description": "x"},
		"projects.delete":        {"projectId": prj},
		"projects.addMember":     {"projectId": prj, "principalId": acme.Viewer.PrincipalID},
		"projects.removeMember":  {"projectId": prj, "principalId": acme.Viewer.PrincipalID},
		"projects.listMembers":   {"projectId": prj},
		"pools.get":              {"poolId": metal},
		"pools.update":           {"poolId": vps, "name": "renamed"},
		"pools.archive":          {"poolId": vps},
		"pools.offer":            {"poolId": vps, "toTenantId": "evil", "quota": map[string]any{"gpus": 1, "instances": 1}},
		"pools.unoffer":          {"poolId": vps, "toTenantId": "guest"},
		"joinTokens.create":      {"poolId": metal},
		"joinTokens.list":        {"poolId": metal},
		"joinTokens.revoke":      {"joinTokenId": jtID},
		"machines.register":      {"poolId": metal, "serial": "SN2"},
		"machines.list":          {"poolId": metal},
		"machines.forget":        {"machineId": machine},
		"tpmKeys.allow":          {"poolId": metal, "ekHash": ek},
		"tpmKeys.list":           {"poolId": metal},
		"tpmKeys.disallow":       {"poolId": metal, "ekHash": ek},
		"nodes.get":              {"nodeId": nodeID},
		"nodes.update":           {"nodeId": nodeID, "name": "n1"},
		"nodes.cordon":           {"nodeId": nodeID},
		"nodes.uncordon":         {"nodeId": nodeID},
		"nodes.remove":           {"nodeId": nodeID},
		"joinRequests.list":      {"poolId": metal},
		"joinRequests.get":       {"joinRequestId": jr},
		"joinRequests.approve":   {"joinRequestId": jr},
		"joinRequests.deny":      {"joinRequestId": jr},
		"inventory.get":          {"nodeId": nodeID},
		"inventory.history":      {"nodeId": nodeID},
		"inventory.diff":         {"nodeId": nodeID},
		"profiles.get":           {"profileId": "base"},
		"profiles.validate":      {"profileId": "base"},
		"profiles.render":        {"profileId": "base"},
		"profiles.update":        {"profileId": "base", "profileVersion": 1, "document": profileDoc("base", 1)},
		"profiles.delete":        {"profileId": "base"},
		"instances.get":          {"instanceId": inst},
		"instances.start":        {"instanceId": inst},
		"instances.stop":         {"instanceId": inst},
		"instances.reboot":       {"instanceId": inst},
		"instances.delete":       {"instanceId": inst},
		"instances.events":       {"instanceId": inst},
		"instances.capacity":     {"poolId": metal},
		"workflows.get":          {"workflowId": wf},
		"workflows.cancel":       {"workflowId": wf},
		"workflows.create":       {"nodeId": nodeID, "profileId": "base"},
		"reservations.get":       {"reservationId": rsv},
		"reservations.cancel":    {"reservationId": rsv},
		"instances.create":       {"poolId": metal, "name": "x", "size": map[string]any{"gpus": 1, "vcpus": 1, "memoryGiB": 1}},
		"reservations.create":    {"poolId": archived, "size": map[string]any{"gpus": 1, "vcpus": 0, "memoryGiB": 0}, "startsAt": start, "endsAt": end},
		"instances.create:vps":   {"poolId": archived, "name": "x", "size": map[string]any{"gpus": 1, "vcpus": 1, "memoryGiB": 1}},
		"reservations.create:bm": {"poolId": metal, "size": map[string]any{"gpus": 1, "vcpus": 0, "memoryGiB": 0}, "startsAt": start, "endsAt": end},
	}
	call := func(token, tenantID, key string) testkit.Resp {
		in := map[string]any{"tenantId": tenantID}
		for k, v := range fx[key] {
			in[k] = v
		}
		method, _, _ := strings.Cut(key, ":")
		return env(t, e).Call(token, strings.Replace(method, ".", "/", 1), in)
	}
	tokens := map[string]string{authz.RoleViewer: acme.Viewer.Token, authz.RoleMember: member, authz.RoleAdmin: admin}
	seen := 0
	for _, m := range e.Srv.Registry.Methods() {
		if m.Credential != registry.Bearer || m.Resource == authz.Platform {
			continue
		}
		keys := []string{m.Key()}
		for k := range fx {
			if strings.HasPrefix(k, m.Key()+":") {
				keys = append(keys, k)
			}
		}
		if _, ok := fx[m.Key()]; !ok {
			if m.Resource != authz.Tenant {
				t.Errorf("%s is decided on %s and has no fixture here: add one", m.Key(), m.Resource)
			}
			continue
		}
		seen++
		for _, key := range keys {
			// Readers of the resource without the permission: every role of
			// the owner tenant that lacks it (a project's manage permission
			// comes from being its owner, which a tenant admin counts as).
			for _, role := range []string{authz.RoleViewer, authz.RoleMember, authz.RoleAdmin} {
				if authz.RoleAllows(role, m.Permission) || m.Resource == authz.Project && role == authz.RoleAdmin {
					continue
				}
				if r := call(tokens[role], "acme", key); r.Code() != "PERMISSION_DENIED" {
					t.Errorf("%s by acme's %s (a reader without %s): %d %s", key, role, m.Permission, r.Status, r.Raw)
				}
			}
			// A tenant that cannot see the resource.
			if r := call(evil.Admin.Token, "evil", key); r.Code() != "NOT_FOUND" {
				t.Errorf("%s by another tenant's admin: %d %s", key, r.Status, r.Raw)
			}
		}
	}
	if seen < 50 {
		t.Fatalf("only %d methods checked", seen)
	}
	// A pool no longer offered is as invisible as one never offered, archived
	// or not.
	former := newTenant(t, e, "former")
	gone := vpsPool(t, e, admin, "acme", "gone", nil)
	must(t, e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": gone, "toTenantId": "former",
		"quota": map[string]any{"gpus": 1, "instances": 1}}))
	must(t, e.Call(admin, "pools/unoffer", map[string]any{"tenantId": "acme", "poolId": gone, "toTenantId": "former"}))
	for i := 0; i < 2; i++ {
		for _, key := range []string{"reservations.create", "instances.create:vps"} {
			fx[key]["poolId"] = gone
			if r := call(former.Admin.Token, "former", key); r.Code() != "NOT_FOUND" || r.Path() != "poolId" {
				t.Errorf("%s on a pool no longer offered: %d %s", key, r.Status, r.Raw)
			}
		}
		if i == 0 {
			must(t, e.Call(admin, "pools/archive", map[string]any{"tenantId": "acme", "poolId": gone}))
		}
	}
	// The seed's exception: the owner's pool methods by a tenant the pool
	// is offered to (it reads the pool) are NOT_FOUND.
	if r := call(guest.Admin.Token, "guest", "pools.get"); r.Status != 404 { // metal is not offered
		t.Fatalf("pools.get of a pool not offered: %d %s", r.Status, r.Raw)
	}
	for _, key := range []string{"pools.update", "pools.archive", "pools.offer", "pools.unoffer"} {
		if r := call(guest.Admin.Token, "guest", key); r.Code() != "NOT_FOUND" {
			t.Errorf("%s by the offered tenant's admin: %d %s", key, r.Status, r.Raw)
		}
	}
}
