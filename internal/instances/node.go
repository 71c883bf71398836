package instances

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// The host daemon's side of hosted pools: with its node credential it reads
// the instances assigned to its node (and the GPU devices each holds) and
// reports what it observes.

type (
	AssignedInput struct {
		NodeID string `json:"nodeId"`
		Limit  int    `json:"limit"`
		Cursor string `json:"cursor,omitempty"`
	}
	// Assigned is an instance as its host sees it.
	Assigned struct {
		Instance
		Devices []fit.Device `json:"devices" doc:"The GPU devices the instance holds on this node."`
	}
	ReportInput struct {
		NodeID     string  `json:"nodeId"`
		InstanceID string  `json:"instanceId"`
		State      string  `json:"state"`
		Message    *string `json:"message,omitempty"`
	}
	Reported struct {
		Instance *Instance `json:"instance" doc:"The instance after the report."`
		Changed  bool      `json:"changed" doc:"Whether the report moved the instance; false when it reported the state the instance was already in."`
	}
)

// Observed states a host reports.
var Observed = []string{Provisioning, Running, Stopped, Deleted, Failed}

// locateOwnNode decides a node method on the calling node's own node.
func locateOwnNode(ctx context.Context, nodeID string) authz.Resource {
	r := authz.Resource{Type: authz.Node, ID: nodeID}
	if p := reqctx.PrincipalFrom(ctx); p != nil {
		r.TenantID = p.TenantID
	}
	return r
}

// AssignedTo pages the live instances placed on the node, by id, with
// their devices.
func AssignedTo(ctx context.Context, q store.Q, in *AssignedInput) (*page.Page[Assigned], error) {
	var after string
	if _, err := Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	// The instances and their devices in one statement, one snapshot: read
	// in two, a deleted report committing between them freed the devices
	// of an instance the first had read as deleting, and the daemon was
	// told of an instance holding no devices (a probe saw it five times).
	type withDevices struct {
		Instance
		Devices []byte `db:"devices"`
	}
	rows := []withDevices{}
	if err := q.SelectContext(ctx, &rows, `SELECT `+cols+`, COALESCE((SELECT json_agg(json_build_object('deviceId', a.device_id, 'gpuUuid', a.gpu_uuid)
			ORDER BY a.device_id) FROM instance_allocations a WHERE a.instance_id = instances.instance_id), '[]')::text AS devices
		FROM instances WHERE host_node_id = $1 AND state <> 'deleted' AND instance_id > $2 ORDER BY instance_id LIMIT $3`,
		in.NodeID, after, in.Limit+1); err != nil {
		return nil, store.Wrap(err)
	}
	rows, cur := page.Trim(rows, in.Limit, func(i withDevices) string { return Cursors.Encode(i.InstanceID) })
	out := make([]Assigned, len(rows))
	for k := range rows {
		r := &rows[k].Instance
		r.Normalize()
		r.HostNodeID = r.Host // the host itself, offered or not
		out[k] = Assigned{Instance: *r, Devices: []fit.Device{}}
		if err := json.Unmarshal(rows[k].Devices, &out[k].Devices); err != nil {
			return nil, fmt.Errorf("instance %s devices: %w", r.InstanceID, err)
		}
	}
	return &page.Page[Assigned]{Items: out, Cursor: cur}, nil
}

// Report records what a host observes of one of its instances. An
// observation that completes the instance's transitional state moves it
// (provisioning or rebooting -> running, stopping -> stopped, deleting ->
// deleted); failed fails it from any live state; the state it is already in
// changes nothing. Any other report is INVALID_STATE (the reconciler will
// ask the host for the desired state).
func (s *Service) Report(ctx context.Context, q store.Q, in *ReportInput) (*Reported, error) {
	i, err := one(ctx, q, `SELECT `+cols+` FROM instances WHERE instance_id = $1 AND host_node_id = $2 FOR UPDATE`, in.InstanceID, in.NodeID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "instance %s is not assigned to node %s", in.InstanceID, in.NodeID).With("path", "instanceId")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if in.State == i.State {
		return &Reported{Instance: i, Changed: false}, nil
	}
	var to string
	switch {
	case in.State == Failed && i.State != Deleted:
		to = Failed
	case in.State == Running && (i.State == Provisioning || i.State == Rebooting):
		to = Running
	case in.State == Stopped && i.State == Stopping:
		to = Stopped
	case in.State == Deleted && i.State == Deleting:
		to = Deleted
	default:
		return nil, errs.E(errs.InvalidState, "instance %s is %s; a report of %s does not move it", i.InstanceID, i.State, in.State).
			With("reason", "not-a-move").With("state", i.State).With("path", "state")
	}
	reason := in.Message
	if to == Failed && reason == nil {
		reason = ptr("the host reports the VM failed")
	}
	if _, err := move(ctx, q, i, to, reason); err != nil {
		return nil, err
	}
	if err := s.Enqueue(ctx, q, i.InstanceID); err != nil {
		return nil, err
	}
	return &Reported{Instance: i, Changed: true}, nil
}
