// Package instances holds instances: VMs in VPS pools. Hosted pools
// (vps-hosted) place them on a ready host node with room; provider pools
// (vps-provider) create them through the pool's provider driver. After
// instances.create every call only changes desiredState; the vps.instances
// reconciler (reconciler.go) converges each instance and every state move
// writes an instance.* event (internal/events) in the move's transaction.
// Decisions are made on compute-instance/{instanceId}.
//
// Around it: package fit is the room arithmetic (quota, capacity,
// placement) it asks, package graphread the graph's batched reads over
// its rows and predicates, and package runner the river client and
// duties that run its reconciler in a replica.
package instances

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Cursors and ReservationCursors are the kinds of the instance and
// reservation lists' cursors (both surfaces).
var (
	Cursors            = page.Keyed("instance", ids.Pattern(ids.Instance))
	ReservationCursors = page.Keyed("reservation", ids.Pattern(ids.Reservation))
)

// Size is what an instance gets. gpus counts whole GPUs (exclusive pools),
// MIG devices of gpuProfile (mig pools) or GPU time slices (time-sliced
// pools).
type Size struct {
	GPUs       int     `json:"gpus" doc:"Whole GPUs (exclusive pools), MIG devices of gpuProfile (mig pools) or GPU time slices (time-sliced pools)."`
	VCPUs      int     `json:"vcpus" doc:"Virtual CPUs."`
	MemoryGiB  int     `json:"memoryGiB" doc:"Memory in GiB."`
	GPUProfile *string `json:"gpuProfile,omitempty" doc:"The MIG profile of the instance's GPUs, in a mig vps-hosted pool; absent in other pools."`
}

// Instance is one VM.
type Instance struct {
	InstanceID   string  `json:"instanceId" db:"instance_id" doc:"The instance's id (inst_ and a ULID)."`
	TenantID     string  `json:"tenantId" db:"tenant_id" doc:"The tenant the instance belongs to."`
	PoolID       string  `json:"poolId" db:"pool_id" doc:"The pool the instance was created in."`
	ProjectID    *string `json:"projectId" db:"project_id" doc:"The project the instance is in; null for none (or once its project was deleted)."`
	Name         string  `json:"name" db:"name" doc:"The instance's name, unique among the tenant's live instances."`
	Size         Size    `json:"size" db:"-" doc:"What the instance holds of its pool."`
	Image        *string `json:"image" db:"image" doc:"The image asked for at create; null when none was."`
	DesiredState string  `json:"desiredState" db:"desired_state" schema:"InstanceDesiredState" doc:"The state the caller asked for; the reconciler moves state towards it."`
	State        string  `json:"state" db:"state" schema:"InstanceState" doc:"The observed state, which the reconciler moves towards desiredState: failed is left only by a start or a delete, deleted is final."`
	StateReason  *string `json:"stateReason" db:"state_reason" doc:"Why the instance is in its state (waiting for room, a provider call in flight, a failure). The reconciler rewrites it as it waits and works, without an event and without raising rowVersion; a start of a failed instance that then waits replaces the failure's reason with the wait's (the failure stays in the instance.failed event)."`
	// HostNodeID is the host as answers show it: Host, unless the
	// instance is Offered (then null: the pool's owner's nodes are not
	// shown to the tenants it offers the pool to). Normalize sets it.
	HostNodeID       *string    `json:"hostNodeId" db:"-" doc:"The host node of a hosted pool's instance, once placed; null in a pool offered to the instance's tenant (the owner's nodes are not shown to the tenants it offers the pool to)."`
	RebootGeneration int        `json:"rebootGeneration" db:"reboot_generation" doc:"Goes up by one with every reboot request."`
	RowVersion       int        `json:"rowVersion" db:"row_version" doc:"What expectedVersion is compared with: raised by every change of state, desiredState or rebootGeneration (not by stateReason alone)."`
	CreatedAt        time.Time  `json:"createdAt" db:"created_at" doc:"When the instance was created."`
	UpdatedAt        time.Time  `json:"updatedAt" db:"updated_at" doc:"When the instance last changed."`
	DeletedAt        *time.Time `json:"deletedAt" db:"deleted_at" doc:"When the instance reached deleted; null until then."`

	// Host is the node the instance runs on (host_node_id), Offered
	// whether its pool is another tenant's, offered to its tenant.
	Host               *string   `json:"-" db:"host_node_id"`
	Offered            bool      `json:"-" db:"offered"`
	RebootedGeneration int       `json:"-" db:"rebooted_generation"`
	DesiredAt          time.Time `json:"-" db:"desired_at"`
	StateSince         time.Time `json:"-" db:"state_since"`
	StepTries          int       `json:"-" db:"step_tries"`
	// StepRequested: the provider took the current step's call;
	// RebootTarget: the reboot generation the current boot or reboot ends
	// (migration 00023); Placed: it was ever placed, and so holds room
	// (migration 00026).
	StepRequested bool           `json:"-" db:"step_requested"`
	RebootTarget  int            `json:"-" db:"reboot_target"`
	Placed        bool           `json:"-" db:"placed"`
	ClientToken   sql.NullString `json:"-" db:"client_token"`
	RequestHash   sql.NullString `json:"-" db:"request_hash"`
	GPUs          int            `json:"-" db:"gpus"`
	GPUProfile    *string        `json:"-" db:"gpu_profile"`
	VCPUs         int            `json:"-" db:"vcpus"`
	MemoryGiB     int            `json:"-" db:"memory_gib"`
}

// Normalize finishes an instance read from its row: Size from the size
// columns, HostNodeID from Host, times in UTC.
func (i *Instance) Normalize() *Instance {
	i.Size = Size{GPUs: i.GPUs, VCPUs: i.VCPUs, MemoryGiB: i.MemoryGiB, GPUProfile: i.GPUProfile}
	i.HostNodeID = nil
	if !i.Offered {
		i.HostNodeID = i.Host
	}
	i.CreatedAt, i.UpdatedAt = i.CreatedAt.UTC(), i.UpdatedAt.UTC()
	i.DesiredAt, i.StateSince = i.DesiredAt.UTC(), i.StateSince.UTC()
	if i.DeletedAt != nil {
		t := i.DeletedAt.UTC()
		i.DeletedAt = &t
	}
	return i
}

const cols = `instance_id, tenant_id, pool_id, project_id, name, gpus, gpu_profile, vcpus, memory_gib, image,
	desired_state, desired_at, state, state_reason, state_since, step_tries, step_requested, reboot_generation, rebooted_generation,
	reboot_target, placed, host_node_id, offered, client_token, request_hash, row_version, created_at, updated_at, deleted_at`

// Inputs.
type (
	CreateInput struct {
		TenantID     string  `json:"tenantId"`
		PoolID       string  `json:"poolId"`
		Name         string  `json:"name"`
		Size         Size    `json:"size"`
		ProjectID    *string `json:"projectId,omitempty"`
		Image        *string `json:"image,omitempty"`
		DesiredState string  `json:"desiredState"`
		ClientToken  *string `json:"clientToken,omitempty"`
	}
	RefInput struct {
		TenantID   string `json:"tenantId"`
		InstanceID string `json:"instanceId"`
	}
	ListInput struct {
		TenantID  string `json:"tenantId"`
		PoolID    string `json:"poolId,omitempty"`
		ProjectID string `json:"projectId,omitempty"`
		State     string `json:"state,omitempty"`
		Limit     int    `json:"limit"`
		Cursor    string `json:"cursor,omitempty"`
	}
	ChangeInput struct {
		TenantID        string `json:"tenantId"`
		InstanceID      string `json:"instanceId"`
		ExpectedVersion *int   `json:"expectedVersion,omitempty"`
	}
	EventsInput struct {
		TenantID   string `json:"tenantId"`
		InstanceID string `json:"instanceId"`
		Limit      int    `json:"limit"`
		Cursor     string `json:"cursor,omitempty"`
	}
)

func init() { authz.Register(authz.Instance, resolve) }

// resolve is the relationship resolver of compute-instance: an instance is
// visible to the tenant that created it, and its role decides (members
// manage, viewers read). A pool's owner does not see other tenants'
// instances in it.
func resolve(ctx context.Context, q store.Q, _ *reqctx.Principal, _ string, r authz.Resource) (authz.Visibility, error) {
	var n int
	if err := q.GetContext(ctx, &n, `SELECT count(*) FROM instances WHERE instance_id = $1 AND tenant_id = $2`, r.ID, r.TenantID); err != nil {
		return authz.Visibility{}, store.Wrap(err)
	}
	return authz.Visibility{Exists: n > 0}, nil
}

func notFound(id string) error { return errs.E(errs.NotFound, "instance %s not found", id) }

func one(ctx context.Context, q store.Q, query string, args ...any) (*Instance, error) {
	var i Instance
	if err := q.GetContext(ctx, &i, query, args...); err != nil {
		return nil, err
	}
	return i.Normalize(), nil
}

// poolRow is what instances need of a pool.
type poolRow struct {
	PoolID      string         `db:"pool_id"`
	TenantID    string         `db:"tenant_id"`
	Kind        string         `db:"kind"`
	SharingMode string         `db:"sharing_mode"`
	Provider    sql.NullString `db:"provider"`
	Account     sql.NullString `db:"provider_account"`
	Policy      string         `db:"policy"`
	State       string         `db:"state"`
	QuotaGPUs   sql.NullInt64  `db:"quota_gpus"`
	QuotaInst   sql.NullInt64  `db:"quota_instances"`
}

// offered reports whether the tenant is an offered tenant (bounded by quota)
// rather than the owner.
func (p *poolRow) offered(tenantID string) bool { return p.TenantID != tenantID }

const poolCols = `p.pool_id, p.tenant_id, p.kind, p.sharing_mode, p.provider, p.provider_account, p.policy::text AS policy, p.state,
	o.quota_gpus, o.quota_instances`

// visiblePool reads a pool the tenant owns or is offered, with the offer's
// quota, locking the pool row with lock ("" for none). Anything else is
// NOT_FOUND naming poolId.
func visiblePool(ctx context.Context, q store.Q, tenantID, poolID, lock string) (*poolRow, error) {
	if err := authz.LockPool(ctx, q, poolID, lock); err != nil {
		return nil, err
	}
	var p poolRow
	err := q.GetContext(ctx, &p, `SELECT `+poolCols+` FROM pools p
		LEFT JOIN pool_offers o ON o.pool_id = p.pool_id AND o.to_tenant_id = $2
		WHERE p.pool_id = $1 AND `+pools.Visible("ARRAY[$2]")+` `+lock, poolID, tenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "pool %s not found", poolID).With("path", "poolId")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &p, nil
}

// lockedQuota locks the tenant's offer of the pool and reads its quota, so
// that the tenant's creates and reservations in the pool count one at a
// time. An offer withdrawn while the call waited for the pool's lock (the
// locking read of the pool sees the offer as it was) is NOT_FOUND, as the
// pool now is to the tenant.
func lockedQuota(ctx context.Context, q store.Q, poolID, tenantID string) (fit.QuotaUse, error) {
	var quota fit.QuotaUse
	err := q.GetContext(ctx, &quota, `SELECT quota_instances AS instances, quota_gpus AS gpus FROM pool_offers
		WHERE pool_id = $1 AND to_tenant_id = $2 FOR UPDATE`, poolID, tenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return quota, errs.E(errs.NotFound, "pool %s not found", poolID).With("path", "poolId")
	}
	return quota, store.Wrap(err)
}

// usable refuses pools instances cannot live in: bare-metal pools and
// archived pools (INVALID_STATE with details.reason).
func (p *poolRow) usable() error {
	if p.Kind == "bare-metal" {
		return errs.E(errs.InvalidState, "pool %s is a bare-metal pool; instances live in vps-hosted and vps-provider pools", p.PoolID).
			With("reason", "bare-metal").With("path", "poolId")
	}
	if p.State != "active" {
		return errs.E(errs.InvalidState, "pool %s is %s", p.PoolID, p.State).With("reason", p.State).With("path", "poolId")
	}
	return nil
}

// checkSize applies the pool's sharing mode to a size.
func checkSize(p *poolRow, s Size) error {
	if p.SharingMode == fit.MIG && p.Kind == "vps-hosted" {
		if s.GPUs > 0 && s.GPUProfile == nil {
			return errs.Invalid("size.gpuProfile", "pool %s shares GPUs as MIG devices: name the MIG profile (e.g. 1g.10gb) in size.gpuProfile", p.PoolID)
		}
	} else if s.GPUProfile != nil {
		return errs.Invalid("size.gpuProfile", "size.gpuProfile is only for vps-hosted pools that share GPUs as MIG devices")
	}
	return nil
}

// quotaUse counts an offered tenant's live instances and their GPUs in a
// pool (deleted instances free their share).
func quotaUse(ctx context.Context, q store.Q, tenantID, poolID string) (fit.QuotaUse, error) {
	var u fit.QuotaUse
	err := q.GetContext(ctx, &u, `SELECT count(*) AS instances, COALESCE(sum(gpus), 0) AS gpus FROM instances
		WHERE pool_id = $1 AND tenant_id = $2 AND state <> 'deleted'`, poolID, tenantID)
	return u, store.Wrap(err)
}

func quotaErr(what string, quota, used fit.QuotaUse, extra int) error {
	return errs.E(errs.InvalidState, "the pool's offer allows %s and %s; %s",
		fit.Count(quota.Instances, "instance", "instances"), fit.Count(quota.GPUs, "GPU", "GPUs"), what).
		With("reason", "quota").With("quota", quota).With("used", used).With("requested", extra)
}

// requestHash identifies a create's input for clientToken retries.
func requestHash(in *CreateInput) string {
	c := *in
	c.ClientToken = nil
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Create stores a pending instance and its instance.created event, and
// enqueues its reconciliation, in the caller's transaction.
func (s *Service) Create(ctx context.Context, q store.Q, in *CreateInput) (*Instance, error) {
	if in.DesiredState == "" {
		in.DesiredState = Running
	}
	if in.DesiredState == Deleted {
		return nil, errs.Invalid("desiredState", "an instance is created running or stopped")
	}
	hash := requestHash(in)
	if in.ClientToken != nil {
		// Retries with one token are serialized; the first one's instance
		// answers the others.
		if _, err := q.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, in.TenantID, *in.ClientToken); err != nil {
			return nil, store.Wrap(err)
		}
		prev, err := one(ctx, q, `SELECT `+cols+` FROM instances WHERE tenant_id = $1 AND client_token = $2`, in.TenantID, *in.ClientToken)
		if err == nil {
			if prev.RequestHash.String != hash {
				return nil, errs.E(errs.Conflict, "clientToken %q was used for a different request", *in.ClientToken).
					With("path", "clientToken").With("instanceId", prev.InstanceID)
			}
			return prev, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, store.Wrap(err)
		}
	}
	if in.ProjectID != nil {
		// The project is held before the pool is locked (authorities
		// first, then rows), as a project's own mutations hold it: a
		// stream of creates does not keep the deletion waiting
		// (authz.HoldAuthority). Held after the pool's share lock, a
		// create waited for a deletion of the project that waited for an
		// instance row a placement held, whose lock of the pool waited for
		// the create: a probe's calls stalled for seconds, some until
		// their statement timeout.
		if err := authz.HoldAuthority(ctx, q, authz.ProjectRelations(*in.ProjectID)); err != nil {
			return nil, err
		}
	}
	// Decisions first: what the tenant cannot see is NOT_FOUND before any
	// rule about it. The share lock keeps the pool from being archived or
	// its offer withdrawn until commit.
	p, err := visiblePool(ctx, q, in.TenantID, in.PoolID, "FOR SHARE OF p")
	if err != nil {
		return nil, err
	}
	if in.ProjectID != nil {
		// The key share lock is the one the insert's foreign key takes,
		// taken here: a projects.delete running meanwhile waits for this
		// commit (and then clears the new instance's project, as for every
		// instance of the project), or committed first and the project is
		// not found here, with its path. Checked without it, the delete
		// could commit between this check and the insert, whose foreign
		// key then failed with a generic NOT_FOUND.
		var found []string
		if err := q.SelectContext(ctx, &found, `SELECT project_id FROM projects WHERE project_id = $1 AND tenant_id = $2 FOR KEY SHARE`, *in.ProjectID, in.TenantID); err != nil {
			return nil, store.Wrap(err)
		}
		if len(found) == 0 {
			return nil, errs.E(errs.NotFound, "project %s not found", *in.ProjectID).With("path", "projectId")
		}
	}
	if err := p.usable(); err != nil {
		return nil, err
	}
	if err := checkSize(p, in.Size); err != nil {
		return nil, err
	}
	if p.offered(in.TenantID) {
		// The offer row is locked so that concurrent creates (and
		// reservations) of this tenant in this pool count one at a time.
		quota, err := lockedQuota(ctx, q, in.PoolID, in.TenantID)
		if err != nil {
			return nil, err
		}
		used, err := quotaUse(ctx, q, in.TenantID, in.PoolID)
		if err != nil {
			return nil, err
		}
		if !fit.InstanceFitsQuota(quota, used, in.Size.GPUs) {
			return nil, quotaErr(fmt.Sprintf("the tenant has %s with %s and asks for one more, of %s",
				fit.Count(used.Instances, "instance", "instances"), fit.Count(used.GPUs, "GPU", "GPUs"), fit.Count(in.Size.GPUs, "GPU", "GPUs")),
				quota, used, in.Size.GPUs)
		}
	}
	i, err := one(ctx, q, `INSERT INTO instances (instance_id, tenant_id, pool_id, project_id, name, gpus, gpu_profile, vcpus, memory_gib,
			image, desired_state, client_token, request_hash, offered)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING `+cols,
		ids.New(ids.Instance), in.TenantID, in.PoolID, in.ProjectID, in.Name, in.Size.GPUs, in.Size.GPUProfile, in.Size.VCPUs, in.Size.MemoryGiB,
		in.Image, in.DesiredState, in.ClientToken, hash, p.TenantID != in.TenantID)
	if store.IsUnique(err, "instances_tenant_name_key") {
		return nil, errs.E(errs.Conflict, "tenant %s already has a live instance named %q", in.TenantID, in.Name).With("path", "name")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if err := writeEvent(ctx, q, i); err != nil {
		return nil, err
	}
	if err := s.Enqueue(ctx, q, i.InstanceID); err != nil {
		return nil, err
	}
	return i, nil
}

// writeEvent records the instance's current state as an event.
func writeEvent(ctx context.Context, q store.Q, i *Instance) error {
	return events.Write(ctx, q, events.Record{Type: EventType(i.State), TenantID: i.TenantID, PoolID: i.PoolID, ResourceID: i.InstanceID, Data: i})
}

// Get returns one of the tenant's instances. The method surface's reads
// use the graph's predicates (Visible, ReservationVisible) bound to the
// tenant their decision named.
func Get(ctx context.Context, q store.Q, in *RefInput) (*Instance, error) {
	i, err := one(ctx, q, `SELECT `+cols+` FROM instances i WHERE instance_id = $1 AND `+Visible("ARRAY[$2]"), in.InstanceID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(in.InstanceID)
	}
	return i, store.Wrap(err)
}

// List pages the tenant's instances by id, filtered by pool, project and
// state. Deleted instances are listed only when state asks for them.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Instance], error) {
	var after string
	if _, err := Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows := []Instance{}
	branch := func(state string) string {
		return `(SELECT ` + cols + ` FROM instances i
			WHERE ` + Visible("ARRAY[$1]") + ` AND instance_id > $2
			  AND ($3 = '' OR pool_id = $3) AND ($4 = '' OR project_id = $4) AND ` + state + `
			ORDER BY instance_id LIMIT $6)`
	}
	b := StateBranches("$5")
	err := q.SelectContext(ctx, &rows, `SELECT * FROM (`+branch(b[0])+` UNION ALL `+branch(b[1])+`) u ORDER BY instance_id`,
		in.TenantID, after, in.PoolID, in.ProjectID, in.State, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		rows[i].Normalize()
	}
	items, cur := page.Trim(rows, in.Limit, func(i Instance) string { return Cursors.Encode(i.InstanceID) })
	return &page.Page[Instance]{Items: items, Cursor: cur}, nil
}

// purgeBatch bounds one purging statement.
const purgeBatch = 10000

// Purge removes the instances deleted before cutoff (the event retention:
// their events, the last of them instance.deleted, are gone by then too),
// oldest first, at most purgeBatch per statement, and returns how many. A
// deleted instance stays readable until then (instances.get, a list with
// state deleted, the graph); after, it is NOT_FOUND like an id never used,
// and its client token may be used again. Its audit records stay for their
// own retention. Rows another transaction holds are left for the next run.
func Purge(ctx context.Context, db *store.DB, cutoff time.Time) (int64, error) {
	var total int64
	for {
		var n int64
		err := db.GetContext(ctx, &n, `WITH d AS (
				DELETE FROM instances WHERE instance_id IN (
					SELECT instance_id FROM instances i WHERE state = 'deleted' AND deleted_at < $1
					  AND NOT EXISTS (SELECT 1 FROM instance_allocations a WHERE a.instance_id = i.instance_id)
					ORDER BY deleted_at LIMIT $2 FOR UPDATE SKIP LOCKED)
				RETURNING 1)
			SELECT count(*) FROM d`, cutoff, purgeBatch)
		if err != nil {
			return total, store.Wrap(err)
		}
		total += n
		if n < purgeBatch {
			return total, nil
		}
	}
}

// StateBranches are the two branches of a list of instances by its state
// filter (over instances i), of an SQL text expression of the state asked
// for: every state but deleted when it is empty, or that state. A list is
// the union of the two, each with the list's other conditions: one branch
// is empty whatever the filter, and each states its condition on i.state
// as a constant or an equality, so that PostgreSQL reads the live
// instances' partial index or the one keyed by state (migration 00021),
// and a page of live instances reads no deleted row however many there
// are. (One condition over both, such as a CASE on the filter, left a
// generic plan, and the graph's batches, reading every deleted row.)
func StateBranches(state string) [2]string {
	return [2]string{state + ` = '' AND i.state <> 'deleted'`, state + ` <> '' AND i.state = ` + state}
}

// lockOwn locks one of the tenant's instances for a desired-state change.
func lockOwn(ctx context.Context, q store.Q, in *ChangeInput) (*Instance, error) {
	i, err := one(ctx, q, `SELECT `+cols+` FROM instances WHERE instance_id = $1 AND tenant_id = $2 FOR UPDATE`, in.InstanceID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(in.InstanceID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return i, nil
}

func checkVersion(i *Instance, expected *int) error {
	if expected != nil && *expected != i.RowVersion {
		return errs.E(errs.Conflict, "instance %s is at rowVersion %d, not %d", i.InstanceID, i.RowVersion, *expected).
			With("rowVersion", i.RowVersion)
	}
	return nil
}

func deletedErr(i *Instance) error {
	return errs.E(errs.InvalidState, "instance %s is being deleted or is deleted", i.InstanceID).
		With("reason", "deleted").With("state", i.State).With("desiredState", i.DesiredState)
}

// setDesired changes only desiredState (and, for a reboot, the reboot
// generation), bumps rowVersion, and enqueues the reconciliation; a call
// asking for what is already desired changes nothing, except on a failed
// instance, where a start or a delete asks the reconciler to act again.
func (s *Service) setDesired(ctx context.Context, q store.Q, in *ChangeInput, desired string, reboot bool) (*Instance, error) {
	// A start of a failed instance provisions it anew: only in a pool its
	// tenant may still create in. The pool is locked before the instance,
	// in the order creates and placements take them.
	var pool *poolRow
	if desired == Running && !reboot {
		var peek struct {
			State  string `db:"state"`
			PoolID string `db:"pool_id"`
		}
		err := q.GetContext(ctx, &peek, `SELECT state, pool_id FROM instances WHERE instance_id = $1 AND tenant_id = $2`, in.InstanceID, in.TenantID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, store.Wrap(err)
		}
		if err == nil && peek.State == Failed {
			if pool, err = visiblePool(ctx, q, in.TenantID, peek.PoolID, "FOR SHARE OF p"); err != nil && errs.CodeOf(err) != errs.NotFound {
				return nil, err
			}
		}
	}
	i, err := lockOwn(ctx, q, in)
	if err != nil {
		return nil, err
	}
	// The version first: a caller whose view is stale is told so (and
	// reads the instance again) before anything is decided on that view.
	if err := checkVersion(i, in.ExpectedVersion); err != nil {
		return nil, err
	}
	if i.DesiredState == Deleted && desired != Deleted {
		return nil, deletedErr(i)
	}
	if desired == Running && !reboot && i.State == Failed {
		if pool == nil { // it failed since the peek: read, not locked
			if pool, err = visiblePool(ctx, q, i.TenantID, i.PoolID, ""); err != nil && errs.CodeOf(err) != errs.NotFound {
				return nil, err
			}
		}
		if err := restartable(i, pool); err != nil {
			return nil, err
		}
	}
	if reboot && (i.DesiredState != Running || i.State == Failed) {
		return nil, errs.E(errs.InvalidState, "instance %s is %s (desired %s); only a running instance reboots", i.InstanceID, i.State, i.DesiredState).
			With("reason", "not-running").With("state", i.State).With("desiredState", i.DesiredState)
	}
	if !reboot && i.DesiredState == desired && (i.State != Failed || desired == Stopped) {
		// (A stop of a failed instance already desired stopped asks
		// nothing more of the reconciler: it bumped rowVersion, staling
		// other clients' expectedVersion, and wrote a success for a
		// change that was none.)
		return i, nil
	}
	bump := 0
	if reboot {
		bump = 1
	}
	i, err = one(ctx, q, `UPDATE instances SET desired_state = $2, desired_at = clock_timestamp(), reboot_generation = reboot_generation + $3,
			row_version = row_version + 1, updated_at = now()
		WHERE instance_id = $1 RETURNING `+cols, i.InstanceID, desired, bump)
	if err != nil {
		return nil, store.Wrap(err)
	}
	if err := s.Enqueue(ctx, q, i.InstanceID); err != nil {
		return nil, err
	}
	return i, nil
}

// restartable refuses a failed instance's start where a create in its pool
// is refused: the pool no longer offered to the tenant, or archived. It
// provisioned anew there (a probe's instance ran again after the offer was
// withdrawn, and one that had failed waiting for a place failed again at
// every start).
func restartable(i *Instance, p *poolRow) error {
	if p == nil {
		return errs.E(errs.InvalidState, "instance %s failed, and its pool %s is no longer offered to tenant %s: it starts again only where its tenant may create instances; delete it",
			i.InstanceID, i.PoolID, i.TenantID).With("reason", "not-offered").With("state", i.State).With("desiredState", i.DesiredState)
	}
	if p.State != "active" {
		return errs.E(errs.InvalidState, "instance %s failed, and its pool %s is %s: it starts again only where its tenant may create instances; delete it",
			i.InstanceID, i.PoolID, p.State).With("reason", p.State).With("state", i.State).With("desiredState", i.DesiredState)
	}
	return nil
}

// Start asks for the instance running (and retries a failed one).
func (s *Service) Start(ctx context.Context, q store.Q, in *ChangeInput) (*Instance, error) {
	return s.setDesired(ctx, q, in, Running, false)
}

// Stop asks for the instance stopped.
func (s *Service) Stop(ctx context.Context, q store.Q, in *ChangeInput) (*Instance, error) {
	return s.setDesired(ctx, q, in, Stopped, false)
}

// Reboot records a reboot request: the reboot generation goes up by one and
// the reconciler reboots the instance once for it.
func (s *Service) Reboot(ctx context.Context, q store.Q, in *ChangeInput) (*Instance, error) {
	return s.setDesired(ctx, q, in, Running, true)
}

// Delete asks for the instance deleted.
func (s *Service) Delete(ctx context.Context, q store.Q, in *ChangeInput) (*Instance, error) {
	return s.setDesired(ctx, q, in, Deleted, false)
}

// Event is an instance.* event as the method surface shows it: the
// tenant's event (package events) with the instance as of the event.
type Event struct {
	EventID      string    `json:"eventId" doc:"The event's id (evt_ and 26 characters), in commit order within the tenant: pass it as cursor to read on after this event."`
	Type         string    `json:"type" schema:"InstanceEventType" doc:"What happened: the instance was created, or moved to the state the type names."`
	TenantID     string    `json:"tenantId" doc:"The instance's tenant."`
	PoolID       string    `json:"poolId" doc:"The instance's pool."`
	InstanceID   string    `json:"instanceId" doc:"The instance that moved."`
	ProjectID    *string   `json:"projectId" doc:"The instance's project as of the event; null for none."`
	State        string    `json:"state" schema:"InstanceState" doc:"The instance's state after the move."`
	DesiredState string    `json:"desiredState" schema:"InstanceDesiredState" doc:"The instance's desired state as of the event."`
	StateReason  *string   `json:"stateReason" doc:"The instance's stateReason as of the event (a failure's reason in instance.failed); null for none."`
	OccurredAt   time.Time `json:"occurredAt" doc:"When the move was made."`
	// Instance is the instance as of the event.
	Instance Instance `json:"instance" doc:"The instance as of the event."`
}

// EventOf is the method surface's form of an instance event.
func EventOf(ev *events.Event) (Event, error) {
	var i Instance
	if err := json.Unmarshal(ev.Data, &i); err != nil {
		return Event{}, fmt.Errorf("instances: event %s: %w", ev.EventID, err)
	}
	return Event{EventID: ev.EventID, Type: ev.Type, TenantID: ev.TenantID, PoolID: i.PoolID, InstanceID: ev.ResourceID,
		ProjectID: i.ProjectID, State: i.State, DesiredState: i.DesiredState, StateReason: i.StateReason,
		OccurredAt: ev.OccurredAt, Instance: i}, nil
}

// EventPage is a page of an instance's events.
type EventPage = page.Page[Event]

// Events pages one instance's events oldest first; the cursor is the last
// event id returned.
func Events(ctx context.Context, q store.Q, in *EventsInput) (*EventPage, error) {
	after, err := events.ParseCursor("cursor", in.TenantID, in.Cursor)
	if err != nil {
		return nil, err
	}
	if in.Cursor != "" {
		if err := events.CheckCursor(ctx, q, "cursor", in.TenantID, after); err != nil {
			return nil, err
		}
	}
	list, err := events.Page(ctx, q, events.Filter{TenantID: in.TenantID, ResourceID: in.InstanceID, Resources: []string{events.ResInstance}}, after, in.Limit+1)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(list, in.Limit, func(e events.Event) string { return e.EventID })
	out := &EventPage{Items: make([]Event, len(items)), Cursor: cur}
	for i := range items {
		if out.Items[i], err = EventOf(&items[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// txOf returns the *sql.Tx under a mutation's query handle.
func txOf(q store.Q) (*sql.Tx, error) {
	tx, ok := q.(*sqlx.Tx)
	if !ok {
		return nil, errors.New("instances: a state change needs a transaction")
	}
	return tx.Tx, nil
}
