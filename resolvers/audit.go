package resolvers

import (
	"context"
	"time"

	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/loaders"
)

// Helpers of the audit trail's resolvers (audit.resolvers.go): the loaders
// decide (package audit's batch SQL keeps what the caller may read); these
// only shape pages.

func auditLoaders(ctx context.Context) *loaders.AuditLoaders { return loaders.From(ctx).Audit }

// auditConn reads one parent's filtered page of records, asking for the
// same page of every sibling parent at once.
func auditConn(ctx context.Context, ld scopedLoader[audit.Record], parent string, resourceID, principalID, method *string, since, until *time.Time, first *int, after *string) (*model.AuditRecordConnection, error) {
	f, err := audit.NewFilter(parent, resourceID, principalID, method, since, until)
	if err != nil {
		return nil, err
	}
	n, k, err := pageArgs(first, after)
	if err == nil {
		err = audit.CheckCursorKey("after", k)
	}
	if err != nil {
		return nil, err
	}
	loaders.PrefetchAudit(ctx, loaders.From(ctx), ld, f, n, k)
	c, err := ld.Load(ctx, loaders.PageKey{Parent: f.Key(), First: n, After: k})()
	if err != nil {
		return nil, err
	}
	edges, info, total := connection(ctx, c, audit.CursorKey, func(cur string, r *audit.Record) *model.AuditRecordEdge {
		return &model.AuditRecordEdge{Cursor: cur, Node: r}
	})
	return &model.AuditRecordConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}
