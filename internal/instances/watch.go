package instances

import (
	"context"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/pattern"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Watch is what a subscription to instance events asks for.
type Watch struct {
	Filter events.Filter
}

// The graph checks its arguments with the registry's compiled patterns
// (ECMA-262 semantics, package pattern).
var (
	tenantRe   = pattern.MustCompile(registry.TenantPattern)
	instanceRe = pattern.MustCompile(ids.Pattern(ids.Instance))
	poolRe     = pattern.MustCompile(ids.Pattern(ids.Pool))
)

// ParseWatch checks a subscription's arguments as the method surface checks
// its inputs; the cursor is read after the decision, as the methods read
// theirs (events.ParseCursor).
func ParseWatch(tenantID string, instanceID, poolID *string) (Watch, error) {
	w := Watch{Filter: events.Filter{TenantID: tenantID, Resources: []string{events.ResInstance}}}
	if !tenantRe.MatchString(tenantID) {
		return w, errs.Invalid("tenantId", "tenantId does not match %s", registry.TenantPattern)
	}
	if instanceID != nil && *instanceID != "" {
		if !instanceRe.MatchString(*instanceID) {
			return w, errs.Invalid("instanceId", "instanceId does not match %s", ids.Pattern(ids.Instance))
		}
		w.Filter.ResourceID = *instanceID
	}
	if poolID != nil && *poolID != "" {
		if !poolRe.MatchString(*poolID) {
			return w, errs.Invalid("poolId", "poolId does not match %s", ids.Pattern(ids.Pool))
		}
		w.Filter.PoolID = *poolID
	}
	return w, nil
}

// AuthorizeEvents decides a subscription to a tenant's instance events: it
// is decided as compute:instances:read on the tenant; instanceId and poolId
// are filters, and an instance or pool the tenant cannot see is NOT_FOUND.
// Subscriptions run it again whenever the caller's role bindings change.
func AuthorizeEvents(ctx context.Context, q store.Q, p *reqctx.Principal, w Watch) error {
	tenantID, instanceID, poolID := w.Filter.TenantID, w.Filter.ResourceID, w.Filter.PoolID
	if err := authz.Decide(ctx, q, p, authz.InstancesRead, authz.Resource{Type: authz.Tenant, TenantID: tenantID}); err != nil {
		return err
	}
	if instanceID != "" {
		if err := authz.Decide(ctx, q, p, authz.InstancesRead, authz.Resource{Type: authz.Instance, TenantID: tenantID, ID: instanceID}); err != nil {
			if e, ok := errs.As(err); ok && e.Code == errs.NotFound {
				return errs.E(errs.NotFound, "instance %s not found", instanceID).With("path", "instanceId")
			}
			return err
		}
	}
	if poolID != "" {
		if err := authz.Decide(ctx, q, p, authz.PoolsRead, authz.Resource{Type: authz.Pool, TenantID: tenantID, ID: poolID}); err != nil {
			if e, ok := errs.As(err); ok && e.Code == errs.NotFound {
				return errs.E(errs.NotFound, "pool %s not found", poolID).With("path", "poolId")
			}
			return err
		}
	}
	return nil
}
