package nodes

import (
	"context"
	"database/sql"
	"errors"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// ownNode are the permissions a node principal holds on its own node,
// whatever its role (it has none): it reports its inventory, its workflow
// steps and the instances it hosts.
var ownNode = []authz.Permission{authz.InventoryReport, authz.WorkflowsReport, authz.InstancesReport}

func init() { authz.Register(authz.Node, resolve) }

// resolve is the relationship resolver of compute-node/{nodeId}: a node is
// visible only to the tenant that owns it (the owner of its pool; offered
// tenants do not see nodes). A node principal holds the report permissions
// on its own node and nothing on any other.
func resolve(ctx context.Context, q store.Q, p *reqctx.Principal, _ string, r authz.Resource) (authz.Visibility, error) {
	if p != nil && p.Kind == "node" {
		if p.NodeID != r.ID {
			return authz.Visibility{}, nil
		}
		var state string
		err := q.GetContext(ctx, &state, `SELECT state FROM nodes WHERE node_id = $1`, r.ID)
		if errors.Is(err, sql.ErrNoRows) || state == "removed" {
			return authz.Visibility{}, nil
		}
		if err != nil {
			return authz.Visibility{}, store.Wrap(err)
		}
		return authz.Visibility{Exists: true, Direct: ownNode}, nil
	}
	var n int
	err := q.GetContext(ctx, &n, `SELECT count(*) FROM nodes WHERE node_id = $1 AND tenant_id = $2`, r.ID, r.TenantID)
	if err != nil {
		return authz.Visibility{}, store.Wrap(err)
	}
	return authz.Visibility{Exists: n > 0}, nil
}
