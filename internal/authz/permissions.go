package authz

import "fmt"

// Permission is one thing a decision can allow. Only the constants below
// exist: Decide refuses any other value (never a silent allow), and the
// method registry panics at start-up on a method naming one (CheckKnown).
type Permission string

// The permissions. Reads end in :read; every role holds every read.
const (
	TenantsRead   Permission = "compute:tenants:read"
	TenantsCreate Permission = "compute:tenants:create"

	ProfilesRead   Permission = "compute:profiles:read"
	ProfilesManage Permission = "compute:profiles:manage"

	ProjectsRead   Permission = "compute:projects:read"
	ProjectsCreate Permission = "compute:projects:create"
	ProjectsManage Permission = "compute:projects:manage"

	PoolsRead   Permission = "compute:pools:read"
	PoolsManage Permission = "compute:pools:manage"

	NodesRead   Permission = "compute:nodes:read"
	NodesManage Permission = "compute:nodes:manage"

	JoinTokensRead      Permission = "compute:joinTokens:read"
	JoinTokensManage    Permission = "compute:joinTokens:manage"
	JoinRequestsApprove Permission = "compute:joinRequests:approve"

	IAMRead   Permission = "compute:iam:read"
	IAMManage Permission = "compute:iam:manage"

	InstancesRead   Permission = "compute:instances:read"
	InstancesManage Permission = "compute:instances:manage"

	WorkflowsRead   Permission = "compute:workflows:read"
	WorkflowsManage Permission = "compute:workflows:manage"

	// AuditRead reads a tenant's audit trail (audit.list, the graph's
	// auditLog fields). A read, but the contract gives it to admins only:
	// the trail names every principal and client address of the tenant.
	AuditRead Permission = "compute:audit:read"

	// Direct permissions of a node principal on its own node (no role
	// grants them).
	InventoryReport Permission = "compute:inventory:report"
	WorkflowsReport Permission = "compute:workflows:report"
	InstancesReport Permission = "compute:instances:report"
)

// reads are the contract's "every compute:*:read", spelled out: a new read
// permission is granted to viewers only once it is listed here.
var reads = []Permission{TenantsRead, ProfilesRead, ProjectsRead, PoolsRead, NodesRead, JoinTokensRead, IAMRead, InstancesRead, WorkflowsRead}

// adminReads are reads that only admins hold (section 8 of the contract
// gives compute:audit:read to admins, although it ends in :read).
var adminReads = []Permission{AuditRead}

// roleTable is the contract's role table: each role's permissions.
var roleTable = func() map[string]map[Permission]bool {
	member := []Permission{ProfilesManage, ProjectsCreate, InstancesManage, WorkflowsManage}
	admin := append([]Permission{PoolsManage, NodesManage, JoinTokensManage, JoinRequestsApprove, IAMManage}, adminReads...)
	set := func(lists ...[]Permission) map[Permission]bool {
		m := map[Permission]bool{}
		for _, l := range lists {
			for _, p := range l {
				m[p] = true
			}
		}
		return m
	}
	return map[string]map[Permission]bool{
		RoleViewer: set(reads),
		RoleMember: set(reads, member),
		RoleAdmin:  set(reads, member, admin),
	}
}()

// known is every permission that exists: those of the role table, the
// direct ones of projects (owner) and nodes (their own credential), and the
// platform's.
var known = func() map[Permission]bool {
	m := map[Permission]bool{TenantsCreate: true, ProjectsManage: true, InventoryReport: true, WorkflowsReport: true, InstancesReport: true}
	for _, perms := range roleTable {
		for p := range perms {
			m[p] = true
		}
	}
	return m
}()

// Known says whether p is one of the permissions above.
func Known(p Permission) bool { return known[p] }

// CheckKnown panics on a permission that does not exist; the registry
// calls it for every method at start-up.
func CheckKnown(p Permission, where string) {
	if !known[p] {
		panic(fmt.Sprintf("authz: %s names unknown permission %q", where, p))
	}
}

// IsRead says whether p is a read permission (it changes nothing: the
// builtin tenant's rule lets the operator hold it there).
func (p Permission) IsRead() bool {
	for _, r := range reads {
		if r == p {
			return true
		}
	}
	for _, r := range adminReads {
		if r == p {
			return true
		}
	}
	return false
}

// RoleAllows is the single table mapping roles to permissions.
func RoleAllows(role string, perm Permission) bool { return roleTable[role][perm] }
