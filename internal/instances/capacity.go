package instances

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/store"
)

// DefaultTime is the time slices per GPU of a time-sliced pool whose
// policy names none.
const DefaultTime = 4

// PolicySlices is the time slices per GPU a pool's policy sets (the
// capacity of a time-sliced pool counts them).
func PolicySlices(policy string) int { return parsePolicy(policy).Slices }

type tenantRes struct {
	TenantID  string `db:"tenant_id"`
	GPUs      int    `db:"gpus"`
	VCPUs     int    `db:"vcpus"`
	MemoryGiB int    `db:"memory_gib"`
}

func byTenant(rows []tenantRes) map[string]fit.Resources {
	out := map[string]fit.Resources{}
	for _, r := range rows {
		out[r.TenantID] = out[r.TenantID].Add(fit.Resources{GPUs: r.GPUs, VCPUs: r.VCPUs, MemoryGiB: r.MemoryGiB})
	}
	return out
}

// HoldsRoom says which rows of instances hold room in their pool's total:
// every placed one until it is deleted (failed or not), and in a hosted
// pool only while its host is ready. A hosted pool's total is its ready
// hosts' room, so what instances hold on a cordoned host is in neither
// (a probe's instances on a cordoned host took the ready hosts' room: a
// new instance waited beside an empty host, and free went below zero), and
// a failed one whose host was removed holds nothing (its VM went with the
// host). One that failed before it was placed (instances.placed, migration
// 00026) never held any.
const HoldsRoom = `instances.state NOT IN ('pending', 'deleted') AND instances.placed
	AND (instances.host_node_id IS NULL
		OR EXISTS (SELECT 1 FROM nodes hn WHERE hn.node_id = instances.host_node_id AND hn.state = 'ready'))`

// allocated sums what each tenant's placed instances hold in a pool
// (except one instance, the one being placed).
func allocated(ctx context.Context, q store.Q, poolID, except string) (map[string]fit.Resources, error) {
	var rows []tenantRes
	err := q.SelectContext(ctx, &rows, `SELECT tenant_id, sum(gpus)::bigint AS gpus, sum(vcpus)::bigint AS vcpus, sum(memory_gib)::bigint AS memory_gib
		FROM instances WHERE pool_id = $1 AND `+HoldsRoom+` AND instance_id <> $2 GROUP BY tenant_id`, poolID, except)
	return byTenant(rows), store.Wrap(err)
}

// reservedNow sums each tenant's reservations active now in a pool.
func reservedNow(ctx context.Context, q store.Q, poolID string) (map[string]fit.Resources, error) {
	var rows []tenantRes
	err := q.SelectContext(ctx, &rows, `SELECT tenant_id, sum(gpus)::bigint AS gpus, sum(vcpus)::bigint AS vcpus, sum(memory_gib)::bigint AS memory_gib
		FROM reservations WHERE pool_id = $1 AND state = 'active' AND starts_at <= now() AND ends_at > now() GROUP BY tenant_id`, poolID)
	return byTenant(rows), store.Wrap(err)
}

// roomFor decides, under the pool's lock, whether the pool of total has
// room for the instance: with what every tenant's placed instances hold,
// and every reservation not yet ended, those still to come included.
func roomFor(ctx context.Context, q store.Q, i *Instance, poolID string, total fit.Resources) (bool, error) {
	if !total.Fits(sizeOf(i)) {
		return false, nil // larger than the whole pool (roomReasonFor says so)
	}
	alloc, err := allocated(ctx, q, poolID, i.InstanceID)
	if err != nil {
		return false, err
	}
	ws, err := windows(ctx, q, poolID, "")
	if err != nil {
		return false, err
	}
	return fit.InstanceFits(total, alloc, ws, i.TenantID, sizeOf(i), time.Now()), nil
}

func sizeOf(i *Instance) fit.Resources {
	return fit.Resources{GPUs: i.GPUs, VCPUs: i.VCPUs, MemoryGiB: i.MemoryGiB}
}

// lockPool locks the pool's row (mode: FOR UPDATE or FOR SHARE) and reads
// it again into p. The step read the pool before it took the lock, and
// that read is the pool as it was before whatever held the lock committed:
// a placement that waited for a capacity change or an archive decided on
// the old pool (a probe's placements went past a capacity lowered while
// they waited, as reservations did). The locking read returns the row as
// the lock's holder left it.
//
// Placements lock the row alone, without the pool's settings
// (authz.LockPool): a step holds its instance's row when it locks the pool,
// and a placement queued behind an owner's change of the pool closed a
// cycle through the instance rows a project's deletion updates, which
// PostgreSQL resolved only after its deadlock timeout (a probe's calls
// stalled 1–6 s). The reconciler's workers bound how many placements run.
func lockPool(ctx context.Context, q store.Q, p *poolRow, mode string) error {
	return store.Wrap(q.GetContext(ctx, p, `SELECT `+poolCols+` FROM pools p LEFT JOIN pool_offers o ON false
		WHERE p.pool_id = $1 `+mode+` OF p`, p.PoolID))
}

// unplaceable is a placement's refusal that no wait ends: the pool was
// archived, or the pool's owner withdrew its offer to the instance's
// tenant, after the instance was created. The instance fails, saying why.
type unplaceable struct{ reason string }

func (u unplaceable) Error() string { return u.reason }

// quotaLowered is a pending instance's reason while its tenant's placed
// instances leave it no room in the offer's quota (lowered since the
// instance was created).
const quotaLowered = "waiting for quota: the tenant's instances in the pool use the offer's quota"

// admissible decides, under the pool's lock (p as the lock returned it),
// whether the pool still takes the instance at all: an archived pool, or
// one no longer offered to the instance's tenant, places nothing (the
// create checked both, and either may have changed while the instance
// waited for room: a probe saw an instance started in an archived pool
// for a tenant without an offer). An offered tenant's instance is placed
// within the offer's quota as it is now, counting the instances already
// placed (not the pending ones, not this one): an offer lowered below
// what runs keeps what runs and places nothing new until there is room.
// It returns a waiting reason, or unplaceable as the error.
func admissible(ctx context.Context, q store.Q, i *Instance, p *poolRow) (string, error) {
	if p.State != "active" {
		return "", unplaceable{fmt.Sprintf("the pool was %s before the instance was placed", p.State)}
	}
	if !p.offered(i.TenantID) {
		return "", nil
	}
	var quota fit.QuotaUse
	err := q.GetContext(ctx, &quota, `SELECT quota_instances AS instances, quota_gpus AS gpus FROM pool_offers
		WHERE pool_id = $1 AND to_tenant_id = $2 FOR SHARE`, p.PoolID, i.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", unplaceable{"the pool is no longer offered to the instance's tenant"}
	}
	if err != nil {
		return "", store.Wrap(err)
	}
	var used fit.QuotaUse
	if err := q.GetContext(ctx, &used, `SELECT count(*) AS instances, COALESCE(sum(gpus), 0) AS gpus FROM instances
		WHERE pool_id = $1 AND tenant_id = $2 AND state NOT IN ('pending', 'deleted') AND instance_id <> $3`, p.PoolID, i.TenantID, i.InstanceID); err != nil {
		return "", store.Wrap(err)
	}
	if !fit.InstanceFitsQuota(quota, used, i.GPUs) {
		return quotaLowered, nil
	}
	return "", nil
}

// capacityChanged is a pending instance's reason for the step after its
// pool got a capacity while the step waited for the pool.
const capacityChanged = "waiting for capacity: the pool's capacity changed while placing; deciding again"

// roomReason is a pending instance's reason when the pool's room (its
// total less what instances hold, its tenant's own included, and what
// other tenants reserved) is too small for it. (It said "held or reserved
// by other tenants" when the tenant's own instances held it.)
const roomReason = "waiting for capacity: the pool's room is held by its instances or reserved, now or by a reservation still to come"

// roomReasonFor is a pending instance's reason when roomFor found no room:
// roomReason, unless the instance is larger than the pool's whole
// capacity, which no instance's deletion or reservation's end frees (a
// probe's 5-GPU instance in a 4-GPU pool waited with roomReason while
// the capacity showed all 4 free). It waits still: the owner may raise
// the capacity, or make hosts ready.
func roomReasonFor(i *Instance, total fit.Resources) string {
	need := sizeOf(i)
	if total.Fits(need) {
		return roomReason
	}
	var over []string
	for _, d := range []struct {
		name       string
		need, have int
	}{{"GPUs", need.GPUs, total.GPUs}, {"vCPUs", need.VCPUs, total.VCPUs}, {"GiB of memory", need.MemoryGiB, total.MemoryGiB}} {
		if d.need > d.have {
			over = append(over, fmt.Sprintf("%d %s of %d", d.need, d.name, d.have))
		}
	}
	return "waiting for capacity: the instance is larger than the pool's whole capacity (" + strings.Join(over, ", ") +
		"); it waits until the pool's capacity grows"
}

// providerRoom decides whether a pending instance of a provider pool may be
// created now: within the pool's capacity (when its policy sets one) less
// what other tenants hold or have reserved. The pool row is locked so that
// placements and reservations of the pool are decided one at a time.
func (s *Service) providerRoom(ctx context.Context, q store.Q, i *Instance, p *poolRow) (bool, string, error) {
	mode := "FOR UPDATE"
	if _, bounded := fit.ProviderTotal(p.Policy); !bounded {
		mode = "FOR SHARE" // placements in a pool without a capacity need not wait for each other
	}
	if err := lockPool(ctx, q, p, mode); err != nil {
		return false, "", err
	}
	if reason, err := admissible(ctx, q, i, p); reason != "" || err != nil {
		return false, reason, err
	}
	total, bounded := fit.ProviderTotal(p.Policy)
	switch {
	case !bounded:
		return true, "", nil
	case mode == "FOR SHARE":
		// The pool got a capacity while the step waited for its lock: the
		// next step decides, under the lock bounded pools' placements take
		// (a share lock raised to an update lock deadlocks two steps).
		return false, capacityChanged, nil
	}
	if ok, err := roomFor(ctx, q, i, p.PoolID, total); err != nil {
		return false, "", err
	} else if !ok {
		return false, roomReasonFor(i, total), nil
	}
	return true, "", nil
}

// hostRow is a ready host with its latest inventory.
type hostRow struct {
	NodeID   string `db:"node_id"`
	Sections string `db:"sections"`
}

// hosts loads a hosted pool's ready hosts with what they hold (except one
// instance), share-locking the nodes so none is cordoned or removed until
// the placement commits.
func hosts(ctx context.Context, q store.Q, poolID, except string) ([]fit.Host, error) {
	var rows []hostRow
	if err := q.SelectContext(ctx, &rows, `SELECT n.node_id, s.sections::text AS sections FROM nodes n
		JOIN inventory_snapshots s ON s.snapshot_id = n.latest_snapshot_id
		WHERE n.pool_id = $1 AND n.state = 'ready' ORDER BY n.node_id FOR SHARE OF n`, poolID); err != nil {
		return nil, store.Wrap(err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	nodeIDs := make([]string, len(rows))
	for k, r := range rows {
		nodeIDs[k] = r.NodeID
	}
	var taken []struct {
		NodeID   string `db:"node_id"`
		DeviceID string `db:"device_id"`
	}
	if err := q.SelectContext(ctx, &taken, `SELECT node_id, device_id FROM instance_allocations WHERE node_id = ANY($1) AND instance_id <> $2`, nodeIDs, except); err != nil {
		return nil, store.Wrap(err)
	}
	var used []struct {
		NodeID    string `db:"host_node_id"`
		VCPUs     int    `db:"vcpus"`
		MemoryGiB int    `db:"memory_gib"`
	}
	if err := q.SelectContext(ctx, &used, `SELECT host_node_id, sum(vcpus)::bigint AS vcpus, sum(memory_gib)::bigint AS memory_gib FROM instances
		WHERE host_node_id = ANY($1) AND state <> 'deleted' AND instance_id <> $2 GROUP BY host_node_id`, nodeIDs, except); err != nil {
		return nil, store.Wrap(err)
	}
	out := make([]fit.Host, 0, len(rows))
	idx := map[string]int{}
	for _, r := range rows {
		sec, err := inventory.Parse([]byte(r.Sections))
		if err != nil {
			return nil, fmt.Errorf("host %s inventory: %w", r.NodeID, err)
		}
		idx[r.NodeID] = len(out)
		out = append(out, fit.HostOf(r.NodeID, sec, nil, 0, 0))
	}
	for _, t := range taken {
		out[idx[t.NodeID]].Taken[t.DeviceID] = true
	}
	for _, u := range used {
		out[idx[u.NodeID]].UsedVCPUs, out[idx[u.NodeID]].UsedMemoryGiB = u.VCPUs, u.MemoryGiB
	}
	return out, nil
}

// placeHosted places a pending instance of a hosted pool on a host: the
// pool row is locked (placements and reservations of a pool are decided one
// at a time), the pool-level room left by other tenants' holds and
// reservations is checked, a host and devices are chosen, and the devices
// are inserted into instance_allocations, whose primary key refuses a
// device held twice whatever else goes wrong.
func (s *Service) placeHosted(ctx context.Context, q store.Q, i *Instance, p *poolRow) (bool, string, error) {
	if err := lockPool(ctx, q, p, "FOR UPDATE"); err != nil {
		return false, "", err
	}
	if reason, err := admissible(ctx, q, i, p); reason != "" || err != nil {
		return false, reason, err
	}
	pol := parsePolicy(p.Policy)
	hs, err := hosts(ctx, q, p.PoolID, i.InstanceID)
	if err != nil {
		return false, "", err
	}
	if len(hs) == 0 {
		return false, "waiting for capacity: the pool has no ready host with inventory", nil
	}
	total := fit.HostedTotal(p.SharingMode, pol.Slices, hs)
	if ok, err := roomFor(ctx, q, i, p.PoolID, total); err != nil {
		return false, "", err
	} else if !ok {
		if reason, tooLarge := fit.LargerThanAnyHost(p.SharingMode, pol.Slices, hs, sizeOf(i), deref(i.GPUProfile)); tooLarge && total.Fits(sizeOf(i)) {
			return false, reason, nil // within the pool's whole, larger than each of its hosts
		}
		return false, roomReasonFor(i, total), nil
	}
	node, devs, reason := fit.Place(p.SharingMode, pol.Slices, hs, sizeOf(i), deref(i.GPUProfile))
	if node == "" {
		return false, reason, nil
	}
	// A failed instance placed anew leaves the devices it held on its old
	// host only now: one that waits for room keeps them, and so its place
	// (a probe's failed instance, waiting beside a cordoned host, lost its
	// GPU to another instance and was sent back to that host without one
	// when the host was uncordoned).
	if _, err := q.ExecContext(ctx, `DELETE FROM instance_allocations WHERE instance_id = $1`, i.InstanceID); err != nil {
		return false, "", store.Wrap(err)
	}
	devIDs, gpus := make([]string, len(devs)), make([]string, len(devs))
	for k, d := range devs {
		devIDs[k], gpus[k] = d.DeviceID, d.GPUUUID
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO instance_allocations (node_id, device_id, instance_id, gpu_uuid)
		SELECT $1, d, $2, g FROM unnest($3::text[], $4::text[]) AS x(d, g)`, node, i.InstanceID, devIDs, gpus); err != nil {
		return false, "", store.Wrap(err)
	}
	// Placed, it holds room from now on: a failed instance placed for the
	// first time (one an unoffer failed while it waited) is placed here,
	// not by the move from pending (a probe's such instance ran on a GPU
	// that capacity and reservations still counted as free).
	if _, err := q.ExecContext(ctx, `UPDATE instances SET host_node_id = $2, placed = true WHERE instance_id = $1`, i.InstanceID, node); err != nil {
		return false, "", store.Wrap(err)
	}
	i.Host, i.Placed = &node, true
	i.Normalize()
	return true, "", nil
}

// Capacity computes a pool's room (the caller has decided visibility).
func Capacity(ctx context.Context, q store.Q, poolID string, owner bool) (*fit.PoolCapacity, error) {
	var p poolRow
	if err := q.GetContext(ctx, &p, `SELECT `+poolCols+` FROM pools p LEFT JOIN pool_offers o ON false WHERE p.pool_id = $1`, poolID); err != nil {
		return nil, store.Wrap(err)
	}
	var total fit.Resources
	bounded := true
	switch p.Kind {
	case "vps-hosted":
		hs, err := hosts(ctx, q, poolID, "")
		if err != nil {
			return nil, err
		}
		total = fit.HostedTotal(p.SharingMode, parsePolicy(p.Policy).Slices, hs)
	case "vps-provider":
		total, bounded = fit.ProviderTotal(p.Policy)
	}
	alloc, err := allocated(ctx, q, poolID, "")
	if err != nil {
		return nil, err
	}
	res, err := reservedNow(ctx, q, poolID)
	if err != nil {
		return nil, err
	}
	return fit.CapacityOf(poolID, total, bounded, alloc, res, owner), nil
}
