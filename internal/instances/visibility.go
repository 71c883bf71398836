package instances

// Visibility is one predicate per resource type, a function of an SQL
// text[] expression of the tenants the caller reads in: the method surface
// (instances.get, instances.list, reservations.*) binds it to the caller's
// tenant, the graph's batched reads (package graphread) to the caller's
// authz.Scope, so both read under the one definition.

// Visible is an instance's (over instances i): its tenant's readers.
func Visible(tenants string) string { return `i.tenant_id = ANY(` + tenants + `)` }

// ReservationVisible is a reservation's (over reservations r).
func ReservationVisible(tenants string) string { return `r.tenant_id = ANY(` + tenants + `)` }

// EventVisible is an instance event's (over events e): its tenant's
// readers. It says who reads, not which events are instance events: bound
// to every tenant (the operator's NULL scope, authz.Where) a predicate is
// not evaluated at all, so the type is selected by InstanceEvents, outside
// it.
func EventVisible(tenants string) string { return `e.tenant_id = ANY(` + tenants + `)` }

// InstanceEvents selects the instance events among events e.
const InstanceEvents = `e.resource_type = 'instance'`

// CapacityVisible is a pool's capacity's (over pools p): the pool's
// readers, its owner's and those of the tenants it is offered to.
func CapacityVisible(tenants string) string {
	return `(p.tenant_id = ANY(` + tenants + `) OR EXISTS (SELECT 1 FROM pool_offers o WHERE o.pool_id = p.pool_id AND o.to_tenant_id = ANY(` + tenants + `)))`
}

// OwnerView says who reads a pool's per-tenant numbers (over pools p): its
// owner's readers.
func OwnerView(tenants string) string { return `p.tenant_id = ANY(` + tenants + `)` }
