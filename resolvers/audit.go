package resolvers

import (
	"context"
	"time"

	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/audit/auditlist"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/registry"
)

// Helpers of the audit trail's resolvers (audit.resolvers.go): the loaders
// decide (package audit's batch SQL keeps what the caller may read); these
// only shape pages.

func auditLoaders(ctx context.Context) *loaders.AuditLoaders { return loaders.From(ctx).Audit }

// auditConn reads one parent's filtered page of records (the parent's
// tenant is tenantID), asking for the same page of every sibling parent at
// once. Its filters are audit.list's, checked by its rules. view is
// PageKey's: the tenant a shared parent (a pool) was reached through.
func (r *Resolver) auditConn(ctx context.Context, ld scopedLoader[audit.Record], tenantID, view, parent string, resourceID, principalID, method *string, since, until *time.Time, first *int, after *string) (*model.AuditRecordConnection, error) {
	n, k, err := pageArgs(audit.Cursors, first, after)
	if err == nil {
		err = audit.CheckCursorKey("after", k)
	}
	if err != nil {
		return nil, err
	}
	in := auditlist.ListInput{TenantID: tenantID, ResourceID: resourceID, PrincipalID: principalID, Method: method,
		Since: timeText(since), Until: timeText(until), Limit: n}
	if err := registry.Validate(r.Registry, "audit.list", &in); err != nil {
		return nil, err
	}
	f, err := audit.NewFilter(parent, resourceID, principalID, method, since, until)
	if err != nil {
		return nil, err
	}
	// The total is counted when asked for: it reads every record of the
	// filter, and a tenant's trail grows with every call for 400 days.
	f.Counted = asksFor(ctx, "totalCount")
	loaders.PrefetchAudit(ctx, loaders.From(ctx), ld, f, view, n, k)
	c, err := ld.Load(ctx, loaders.PageKey{Parent: f.Key(), First: n, After: k, View: view})()
	if err != nil {
		return nil, err
	}
	edges, info, total := connection(ctx, audit.Cursors, c, audit.CursorKey, func(cur string, r *audit.Record) *model.AuditRecordEdge {
		return &model.AuditRecordEdge{Cursor: cur, Node: r}
	})
	return &model.AuditRecordConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// timeText is a Time argument as a method's time field holds it.
func timeText(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.Format(time.RFC3339Nano)
	return &s
}
