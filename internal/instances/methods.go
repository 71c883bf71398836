package instances

import (
	"context"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
)

// Groups of this package, in docs order.
var (
	// EventSchema names the method surface's instance event as the graph
	// does.
	EventSchema = registry.DefineSchemaOf[Event]("InstanceEvent")

	// The closed sets both surfaces share (GraphQL spells running as
	// RUNNING): the method fields and outputs name them, the graph's enums
	// are them.
	StateEnum            = registry.DefineEnum("InstanceState", "an instance's observed state; failed is left by a start or a delete, deleted is final", States...)
	DesiredStateEnum     = registry.DefineEnum("InstanceDesiredState", "the state a caller asks for; after create, every call changes only this", DesiredStates...)
	ReservationStateEnum = registry.DefineEnum("ReservationState", "scheduled before its window, active in it, expired after it, or canceled", ReservationStates...)

	Group             = registry.Group{Name: "instances", Summary: "Instances are VMs in a VPS pool: hosted pools place them on a host through capacity, and provider pools create them through the pool's provider account. After `create`, every call only changes `desiredState`; the `vps.instances` reconciler converges the instance and publishes `instance.*` events as its `state` moves. Instances are also the sandbox primitive today. `hostNodeId` names the host node once placed, except in a pool offered to the instance's tenant: the pool owner's nodes are not shown to the tenants it offers the pool to, so it is null there. See [Instances](../guides/vps/instances.md)."}
	ReservationsGroup = registry.Group{Name: "reservations", Summary: "A reservation holds capacity (`gpus`, `vcpus`, `memoryGiB`) in one pool for `[startsAt, endsAt)`. It counts against the tenant's quota in that pool, no other tenant can place into the reserved room, and the reserving tenant's instances use it first. An instance has no end, so it is placed only where it leaves room for every reservation, those still to come included: a reservation made for next week keeps its room from other tenants' new instances from the moment it is made."}
)

// PoolRefInput names a pool.
type PoolRefInput struct {
	TenantID string `json:"tenantId"`
	PoolID   string `json:"poolId"`
}

// CapacityOf is the capacity method: the pool's owner also sees what each
// tenant holds, as numbers.
func CapacityOf(ctx context.Context, q store.Q, in *PoolRefInput) (*fit.PoolCapacity, error) {
	p, err := visiblePool(ctx, q, in.TenantID, in.PoolID, "")
	if err != nil {
		return nil, err
	}
	return Capacity(ctx, q, in.PoolID, !p.offered(in.TenantID))
}

// Methods are the instances and reservations groups' registry entries; s
// may have no database when only documents are rendered.
func Methods(s *Service) []registry.Method {
	m := func(group, name string, kind registry.Kind, perm authz.Permission, res, summary string, notes []string, in ...registry.Field) registry.Method {
		return registry.Method{Group: group, Name: name, Kind: kind, Permission: perm, Resource: res,
			Summary: summary, Notes: notes, Module: "vps", Phase: "v0.3", Input: in}
	}
	inst := func(more ...registry.Field) []registry.Field {
		return append([]registry.Field{registry.TenantID(), registry.ID("instanceId", ids.Instance)}, more...)
	}
	expected := registry.Field{Name: "expectedVersion", Type: registry.Integer, Min: registry.Int(1),
		Description: "the instance's rowVersion; a mismatch is CONFLICT"}
	count := func(name string, min, max int64, desc string) registry.Field {
		return registry.Field{Name: name, Type: registry.Integer, Required: true, Min: registry.Int(min), Max: registry.Int(max), Description: desc}
	}
	size := registry.Field{Name: "size", Type: registry.Object, Required: true, Description: "what the instance takes of its pool", Fields: []registry.Field{
		count("gpus", 0, 64, "whole GPUs (exclusive pools), MIG devices of gpuProfile (mig pools) or GPU time slices (time-sliced pools)"),
		count("vcpus", 1, 1024, ""),
		count("memoryGiB", 1, 16384, ""),
		{Name: "gpuProfile", Type: registry.String, Pattern: `^[0-9]{1,2}g\.[0-9]{1,4}gb(\+[a-z]{1,8})?$`,
			Description: "the MIG profile (mig vps-hosted pools only), e.g. 1g.10gb"},
	}}
	resSize := registry.Field{Name: "size", Type: registry.Object, Required: true, Description: "the capacity held", Fields: []registry.Field{
		count("gpus", 0, 100000, ""), count("vcpus", 0, 1000000, ""), count("memoryGiB", 0, 10000000, ""),
	}}
	poolID := registry.ID("poolId", ids.Pool)
	poolFilter := poolID
	poolFilter.Required, poolFilter.Description = false, "only those of this pool"
	projectFilter := registry.ID("projectId", ids.Project)
	projectFilter.Required, projectFilter.Description = false, "only those of this project"
	pageFields := []registry.Field{registry.PageLimit(), registry.Cursor()}
	nodeID := registry.ID("nodeId", ids.Node)

	list := m("instances", "list", registry.Read, authz.InstancesRead, authz.Tenant,
		"Returns a page of the tenant's instances, ordered by id, filtered by pool, project and state.",
		[]string{"Deleted instances are listed only when `state` is `deleted`.",
			"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
		append([]registry.Field{registry.TenantID(), poolFilter, projectFilter,
			func() registry.Field {
				f := registry.EnumField("state", StateEnum, false)
				f.Description = "only the instances in this state"
				return f
			}()}, pageFields...)...)
	list.Items = true

	assigned := m("instances", "assigned", registry.Read, authz.InstancesReport, authz.Node,
		"Returns a page of the live instances placed on the calling node, ordered by id, each with the GPU devices it holds.",
		[]string{"Called with the node's own credential; any other credential is `PERMISSION_DENIED`, as is a node credential naming another node.",
			"Each item is an instance with `devices`: `deviceId` (a GPU UUID, a MIG device UUID, or `<GPU UUID>/<slice>` for a time slice) and `gpuUuid`.",
			"The daemon brings each instance to the state it reads (`provisioning`: create or start the VM; `stopping`: stop it; `rebooting`: reboot it; `deleting`: remove it) and reports with `instances.report`."},
		append([]registry.Field{nodeID}, pageFields...)...)
	assigned.Credential = registry.NodeCred

	report := m("instances", "report", registry.Mutation, authz.InstancesReport, authz.Node,
		"Records what the calling node observes of one of its instances and returns the instance and whether it moved.",
		[]string{"Called with the node's own credential; any other credential is `PERMISSION_DENIED`.",
			"`running` completes `provisioning` and `rebooting`; `stopped` completes `stopping`; `deleted` completes `deleting`; `failed` fails the instance from any live state, with `message` as its `stateReason`.",
			"Reporting the state the instance is already in changes nothing (`changed: false`, no audit record); any other report is `INVALID_STATE` with `details.reason` `not-a-move`.",
			"An instance not placed on the node is `NOT_FOUND`."},
		nodeID, registry.ID("instanceId", ids.Instance),
		registry.Field{Name: "state", Type: registry.String, Required: true, Enum: Observed},
		registry.Field{Name: "message", Type: registry.String, MaxLength: 1024, Description: "what the host says (the reason of a failure)"})
	report.Credential = registry.NodeCred
	report.Quiet = func(out any) bool { r, ok := out.(*Reported); return ok && !r.Changed }

	resList := m("reservations", "list", registry.Read, authz.InstancesRead, authz.Tenant,
		"Returns a page of the tenant's reservations, ordered by id, optionally of one pool or in one state.",
		[]string{"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
		append([]registry.Field{registry.TenantID(), poolFilter,
			registry.EnumField("state", ReservationStateEnum, false)}, pageFields...)...)
	resList.Items = true
	resRef := func(more ...registry.Field) []registry.Field {
		return append([]registry.Field{registry.TenantID(), registry.ID("reservationId", ids.Reservation)}, more...)
	}
	desiredNote := "Only `desiredState` changes (and `rowVersion`); the reconciler moves `state` and writes the events. Asking for the desired state the instance already has changes nothing."
	timeField := func(name, desc string) registry.Field {
		return registry.Field{Name: name, Type: registry.String, Required: true, MaxLength: 64, Description: desc}
	}

	return []registry.Method{
		registry.Def(m("instances", "create", registry.Mutation, authz.InstancesManage, authz.Tenant,
			"Creates an instance in a VPS pool the tenant owns or is offered; it starts `pending` and the reconciler drives it to `desiredState`.",
			[]string{"A pool the tenant neither owns nor is offered, or a project not in the tenant, is `NOT_FOUND` (before any other rule). A bare-metal or archived pool is `INVALID_STATE` with `details.reason` `bare-metal` or `archived`.",
				"An offered tenant's live instances in the pool never exceed the offer's `instances`, nor their GPUs its `gpus`, however many creates run at once: `INVALID_STATE` with `details.reason` `quota`. The owner is bounded by capacity alone. Lowering an offer below current use keeps what runs and refuses new instances.",
				"`size.gpus` counts whole GPUs, MIG devices or time slices after the pool's sharing mode; a mig vps-hosted pool needs `size.gpuProfile` for GPUs, and no other pool takes one (`INVALID_INPUT`).",
				"`clientToken` makes the create idempotent (as EC2's): a retry with the same token and input returns the first instance; the same token with other input is `CONFLICT` with `details.path` `clientToken`.",
				"A live instance's `name` is unique in the tenant: `CONFLICT` with `details.path` `name`.",
				"When no host or provider has room, the instance waits in `pending` with a `stateReason` and is placed when room appears.",
				"Writes the `instance.created` event."},
			registry.TenantID(), poolID, registry.Name(true), size,
			func() registry.Field { f := registry.ID("projectId", ids.Project); f.Required = false; return f }(),
			registry.Field{Name: "image", Type: registry.String, MaxLength: 1024, Description: "the image to boot (provider specific)"},
			registry.Field{Name: "desiredState", Type: registry.String, Enum: []string{Running, Stopped}, Default: Running},
			registry.Field{Name: "clientToken", Type: registry.String, MaxLength: 64, Pattern: `^[\x21-\x7E]{1,64}$`,
				Description: "an idempotency token of the caller's choosing"}), nil, s.Create),
		registry.Def(m("instances", "get", registry.Read, authz.InstancesRead, authz.Instance,
			"Returns one of the tenant's instances.",
			[]string{"`NOT_FOUND` when the tenant has no such instance."}, inst()...), nil, Get),
		registry.Def(list, nil, List),
		registry.Def(m("instances", "start", registry.Mutation, authz.InstancesManage, authz.Instance,
			"Asks for the instance running and returns it.",
			[]string{desiredNote, "Starting a `failed` instance retries it, a new provisioning, only where its tenant may create instances: in a pool no longer offered to its tenant it is `INVALID_STATE` (`details.reason` `not-offered`), in an archived pool `INVALID_STATE` (`details.reason` `archived`); a stopped instance there still starts. An instance being deleted is `INVALID_STATE` (`details.reason` `deleted`).",
				"`expectedVersion` is the instance's rowVersion; a mismatch is `CONFLICT`, whatever the instance's state."}, inst(expected)...), nil, s.Start),
		registry.Def(m("instances", "stop", registry.Mutation, authz.InstancesManage, authz.Instance,
			"Asks for the instance stopped and returns it.",
			[]string{desiredNote, "An instance being deleted is `INVALID_STATE` (`details.reason` `deleted`). A stopped instance keeps its host and devices; a `failed` instance stays failed.",
				"`expectedVersion` is the instance's rowVersion; a mismatch is `CONFLICT`, whatever the instance's state."}, inst(expected)...), nil, s.Stop),
		registry.Def(m("instances", "reboot", registry.Mutation, authz.InstancesManage, authz.Instance,
			"Records a reboot request: `rebootGeneration` goes up by one and the reconciler reboots the instance once for it.",
			[]string{"Only an instance whose desired state is `running` and that has not failed reboots: otherwise `INVALID_STATE` (`details.reason` `not-running` or `deleted`).",
				"`expectedVersion` is the instance's rowVersion; a mismatch is `CONFLICT`, whatever the instance's state."}, inst(expected)...), nil, s.Reboot),
		registry.Def(m("instances", "delete", registry.Mutation, authz.InstancesManage, authz.Instance,
			"Asks for the instance deleted and returns it; it frees its quota, devices and name once `deleted`.",
			[]string{desiredNote, "Deleting a `failed` instance cleans it up. A deleted instance stays readable for the event retention (7 days by default), as its events do; then it is gone (`NOT_FOUND`).",
				"`expectedVersion` is the instance's rowVersion; a mismatch is `CONFLICT`, whatever the instance's state."}, inst(expected)...), nil, s.Delete),
		registry.Def(m("instances", "events", registry.Read, authz.InstancesRead, authz.Instance,
			"Returns a page of one instance's events, oldest first: `eventId`, `type`, `instanceId`, `tenantId`, `poolId`, `projectId`, `state`, `desiredState`, `stateReason`, `occurredAt` and `instance` (the instance as of the event).",
			[]string{"Event types: `instance.created`, `instance.provisioning`, `instance.running`, `instance.stopping`, `instance.stopped`, `instance.rebooting`, `instance.deleting`, `instance.deleted`, `instance.failed`; one per state move, written with the move.",
				"`eventId` order is commit order: an event that commits later never sorts before one already returned. Pass the last `eventId` as `cursor` to read on (also after the last page, to poll).",
				"Events are kept for the configured retention (7 days by default); a cursor older than that is `INVALID_STATE` with `details.reason` `expired-cursor`.",
				"`limit` defaults to 50 and is at most 200."},
			inst(registry.PageLimit(), registry.Field{Name: "cursor", Type: registry.String, Pattern: events.IDPattern})...), nil, Events),
		registry.Def(m("instances", "capacity", registry.Read, authz.PoolsRead, authz.Pool,
			"Returns a pool's capacity: total, allocated (what instances hold), reserved (what active reservations hold beyond that) and free; the owner also sees what each tenant holds.",
			[]string{"A hosted pool's total is its ready hosts' GPU devices (after the sharing mode), vCPUs and memory from their latest inventory, and `allocated` what instances hold on those hosts: instances on a cordoned host are in neither; a provider pool's total is its policy's `capacity` (`bounded: false` and no total when it sets none).",
				"An instance holds room from its placement until it is deleted, `failed` ones included; one that failed before it was ever placed (its pool archived or no longer offered to its tenant while it waited) holds none.",
				"A dimension the policy leaves unbounded (`0` or absent) reads 2147483647, the largest integer, in `total` and `free`, and a bound of 2147483647 is the same as none: it holds any amount. Every amount is at most 2147483647 (reservations of an unbounded dimension may together hold more: they read 2147483647).",
				"`reserved` and `free` are as of now: a reservation whose window is still to come is not in them, but it already keeps its room from new instances (an instance has no end), so an instance may wait while `free` shows room.",
				"`free` is negative when the pool holds more than its total (a `pools.update` lowered `capacity` below what instances and reservations hold): nothing new fits until it is positive again; what runs keeps running.",
				"The sim provider's `capacity.instances` (a count of instances) bounds the provider's own room, not this answer: past it a new instance waits `pending` (\"waiting for capacity: the provider has no room\").",
				"Tenants the pool is offered to see the totals, never who holds what."},
			registry.TenantID(), poolID), nil, CapacityOf),
		registry.Def(assigned, func(ctx context.Context, _ store.Q, in *AssignedInput) (authz.Resource, error) {
			return locateOwnNode(ctx, in.NodeID), nil
		}, AssignedTo),
		registry.Def(report, func(ctx context.Context, _ store.Q, in *ReportInput) (authz.Resource, error) {
			return locateOwnNode(ctx, in.NodeID), nil
		}, s.Report),

		registry.Def(m("reservations", "create", registry.Mutation, authz.InstancesManage, authz.Tenant,
			"Reserves capacity in a VPS pool the tenant owns or is offered for [startsAt, endsAt) and returns the reservation.",
			[]string{"A pool the tenant cannot see is `NOT_FOUND`; a bare-metal or archived pool is `INVALID_STATE`.",
				"`startsAt` and `endsAt` are RFC 3339 times; `endsAt` must be after `startsAt` and in the future, and a window lasts at most 366 days (`INVALID_INPUT`). A `size` must hold at least one GPU, vCPU or GiB (`INVALID_INPUT` at `size` when all three are 0).",
				"An offered tenant's reserved GPUs in the pool never exceed the offer's `gpus` at any moment (`INVALID_STATE`, `details.reason` `quota`); its instances run inside its reservations first, so it holds the larger of the two.",
				"In a pool with a capacity (hosted pools; provider pools whose policy sets `capacity`), what every tenant holds must fit at every moment of the window: `INVALID_STATE` with `details.reason` `capacity` otherwise.",
				"No other tenant's instance is placed into the reserved room, whether the window has begun or not: an instance, which has no end, is placed only where it leaves room for every reservation not yet ended. Instances placed before the reservation was made count as held in its whole window."},
			registry.TenantID(), poolID, resSize,
			timeField("startsAt", "RFC 3339"), timeField("endsAt", "RFC 3339, after startsAt")), nil, CreateReservation).WithAuditOutput("reservationId"),
		registry.Def(m("reservations", "get", registry.Read, authz.InstancesRead, authz.Tenant,
			"Returns one of the tenant's reservations, with its state (`scheduled`, `active`, `expired`, `canceled`).",
			[]string{"`NOT_FOUND` when the tenant has no such reservation."}, resRef()...), nil, GetReservation),
		registry.Def(resList, nil, ListReservations),
		registry.Def(m("reservations", "cancel", registry.Mutation, authz.InstancesManage, authz.Tenant,
			"Cancels a reservation, freeing its room, and returns it.",
			[]string{"A canceled or expired reservation is `INVALID_STATE`.",
				"`expectedVersion` is the reservation's rowVersion; a mismatch is `CONFLICT`."},
			resRef(registry.Field{Name: "expectedVersion", Type: registry.Integer, Min: registry.Int(1)})...), nil, CancelReservation),
	}
}
