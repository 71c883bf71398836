// Package app assembles the registry from every domain package: the one list
// of groups and methods that both surfaces, the index, OpenAPI and docs use.
package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bettercompute/computed/internal/audit/auditlist"
	"github.com/bettercompute/computed/internal/feed"
	"github.com/bettercompute/computed/internal/iam"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/tenants"
	"github.com/bettercompute/computed/internal/workflows"
)

// Groups in docs order.
func Groups() []registry.Group {
	return []registry.Group{tenants.Group, iam.TokensGroup, iam.MembersGroup, projects.Group, pools.Group,
		nodes.JoinTokensGroup, nodes.MachinesGroup, nodes.TPMKeysGroup, nodes.NodesGroup, nodes.JoinRequestsGroup, inventory.Group,
		profiles.Group, workflows.Group, instances.Group, instances.ReservationsGroup, feed.Group, auditlist.Group}
}

// Registry builds the registry; db, metrics and inst may be nil to render
// documents. inst is the instances service (with its reconciler), which
// the caller runs and shuts down.
func Registry(db *store.DB, log *slog.Logger, metrics prometheus.Registerer, inst *instances.Service) *registry.Registry {
	if log == nil {
		log = slog.Default()
	}
	if inst == nil {
		inst, _ = instances.NewService(nil, log, instances.Config{}) // documents only: never fails without a database
	}
	return registry.New(db, log, metrics, Groups(), tenants.Methods(), iam.Methods(), projects.Methods(), pools.Methods(), nodes.Methods(db),
		inventory.Methods(), profiles.Methods(), workflows.Methods(), instances.Methods(inst), feed.Methods(), auditlist.Methods())
}
