package loaders

import (
	"context"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
)

// AuditLoaders read the audit trail: a tenant's, and the records about one
// instance, pool or node. Keys are audit.Filter keys (the parent id with
// the filters). Their batch SQL (package audit) keeps the records of the
// tenants where the caller holds compute:audit:read, so an instance's,
// pool's or node's connection shows a tenant the pool is offered to only
// its own records; a tenant's connection is decided on the tenant
// (PERMISSION_DENIED without the permission, as audit.list).
type AuditLoaders struct {
	Tenant   pageLoader[audit.Record]
	Instance pageLoader[audit.Record]
	Pool     pageLoader[audit.Record]
	Node     pageLoader[audit.Record]
}

func newAuditLoaders(l *Loaders) *AuditLoaders {
	of := func(by audit.Parent) pageLoader[audit.Record] {
		var gate func(string) string
		if by == audit.OfTenant {
			gate = func(key string) string { return audit.ParseFilter(key).Parent }
		}
		return pagesOf(l, authz.AuditRead, gate, func(ctx context.Context, q store.Q, scope authz.Scope, keys []string, after string, limit int) (page.Rows[audit.Record], error) {
			return audit.Pages(ctx, q, scope, by, keys, after, limit)
		}, func(ctx context.Context, q store.Q, scope authz.Scope, keys []string) (map[string]int, error) {
			return audit.Counts(ctx, q, scope, by, keys)
		})
	}
	return &AuditLoaders{Tenant: of(audit.OfTenant), Instance: of(audit.OfInstance), Pool: of(audit.OfPool), Node: of(audit.OfNode)}
}

// auditKind names an audit page loader and the arguments its siblings
// share.
type auditKind struct {
	loader any
	f      audit.Filter // Parent cleared
	after  string
	first  int
	view   string
}

// PrefetchAudit asks an audit page loader for the same page, with the same
// filters, of every sibling of f.Parent, once per loader and arguments: a
// level of audit logs is one statement.
func PrefetchAudit(ctx context.Context, l *Loaders, ld pageLoader[audit.Record], f audit.Filter, view string, first int, after string) {
	shared := f
	shared.Parent = ""
	l.sib.once(f.Parent, auditKind{ld, shared, after, first, view}, func(g *group) {
		keys := make([]PageKey, len(g.ids))
		for i, id := range g.ids {
			k := f
			k.Parent = id
			keys[i] = PageKey{Parent: k.Key(), First: first, After: after, View: view}
		}
		ld.prime(ctx, keys)
	})
}
