// Package feed is a tenant's event stream as its readers see it: the
// events group of the method registry (events.list) and the decision and
// arguments of the graph's tenantEvents subscription. The stream itself
// (writes, order, cursors, retention) is package events'; who reads which
// kind of event is decided here, once for both surfaces.
package feed

import (
	"context"
	"fmt"
	"strings"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pattern"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Permission is the decision on the tenant that reading its stream takes,
// on both surfaces (events.list, tenantEvents); Permissions then narrows
// it to the kinds of events the caller reads.
const Permission = authz.TenantsRead

// Permissions decides who reads each kind of event: whoever reads its
// resource on the tenant. (Roles are bound per tenant, so deciding on the
// tenant is deciding on each of its pools; tenants a pool is offered to
// never read the owner's stream, whose tenant is the owner.)
var Permissions = map[string]authz.Permission{
	events.ResInstance:    authz.InstancesRead,
	events.ResReservation: authz.InstancesRead,
	events.ResNode:        authz.NodesRead,
	events.ResJoinRequest: authz.JoinTokensRead,
	events.ResWorkflow:    authz.WorkflowsRead,
}

// Readable returns the resource types of the tenant's events the principal
// reads. Reading none is the error of the first refused decision (a
// stranger's NOT_FOUND, a viewer-less caller's PERMISSION_DENIED).
func Readable(ctx context.Context, q store.Q, p *reqctx.Principal, tenantID string) ([]string, error) {
	var kinds []string
	var refused error
	decided := map[authz.Permission]error{}
	for _, k := range events.ResourceTypes {
		perm := Permissions[k]
		err, ok := decided[perm]
		if !ok {
			err = authz.Decide(ctx, q, p, perm, authz.Resource{Type: authz.Tenant, TenantID: tenantID})
			decided[perm] = err
		}
		switch c := errs.CodeOf(err); {
		case err == nil:
			kinds = append(kinds, k)
		case c == errs.PermissionDenied || c == errs.NotFound:
			if refused == nil {
				refused = err
			}
		default:
			return nil, err
		}
	}
	if len(kinds) == 0 {
		return nil, refused
	}
	return kinds, nil
}

// TypePattern is an entry of types: an event type, or a prefix of types
// ending in ".".
const TypePattern = `^(?:instance|node|inventory|joinRequest|workflow|reservation)\.(?:[a-z][A-Za-z]{0,31})?$`

// MaxTypes bounds types.
const MaxTypes = 32

var typeRe = pattern.MustCompile(TypePattern)

// ParseTypes checks a types filter: each entry an event type or a prefix
// ending in "." (INVALID_INPUT naming the entry otherwise).
func ParseTypes(path string, types []string) ([]string, error) {
	if len(types) > MaxTypes {
		return nil, errs.Invalid(path, "%s holds at most %d entries", path, MaxTypes)
	}
	for i, t := range types {
		at := fmt.Sprintf("%s[%d]", path, i)
		if !typeRe.MatchString(t) {
			// The method surface's schema says the same first (registry).
			return nil, errs.Invalid(at, "%s does not match %s", at, TypePattern)
		}
		if !strings.HasSuffix(t, ".") {
			if _, ok := events.Kinds[t]; !ok {
				return nil, errs.Invalid(at, "%s: %s is not an event type", at, t)
			}
		}
	}
	return types, nil
}

// --- tenantEvents -------------------------------------------------------

var tenantRe = pattern.MustCompile(registry.TenantPattern)

// Watch is what a tenantEvents subscription asks for.
type Watch struct {
	Filter events.Filter
}

// ParseWatch checks tenantEvents' tenant as the method surface checks
// events.list's; its types and cursor are read after the decision, as
// the method reads them (ParseTypes, events.ParseCursor).
func ParseWatch(tenantID string) (Watch, error) {
	w := Watch{Filter: events.Filter{TenantID: tenantID}}
	if !tenantRe.MatchString(tenantID) {
		return w, errs.Invalid("tenantId", "tenantId does not match %s", registry.TenantPattern)
	}
	return w, nil
}

// Authorize decides a tenantEvents subscription and returns its filter,
// which keeps only the kinds of events the principal reads. Subscriptions
// run it again whenever the caller's role bindings change.
func Authorize(ctx context.Context, q store.Q, p *reqctx.Principal, w Watch) (events.Filter, error) {
	// Decided as events.list is (its registry entry's permission), then
	// narrowed to what the caller reads: both surfaces refuse in the same
	// words.
	if err := authz.Decide(ctx, q, p, Permission, authz.Resource{Type: authz.Tenant, TenantID: w.Filter.TenantID}); err != nil {
		return events.Filter{}, err
	}
	kinds, err := Readable(ctx, q, p, w.Filter.TenantID)
	if err != nil {
		return events.Filter{}, err
	}
	f := w.Filter
	f.Resources = kinds
	return f, nil
}

// --- events.list --------------------------------------------------------

// ListInput is events.list's input.
type ListInput struct {
	TenantID string   `json:"tenantId"`
	Types    []string `json:"types,omitempty"`
	Cursor   string   `json:"cursor,omitempty"`
	Limit    int      `json:"limit"`
}

// List pages the tenant's events the caller reads, oldest first.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[events.Event], error) {
	types, err := ParseTypes("types", in.Types)
	if err != nil {
		return nil, err
	}
	after, err := events.ParseCursor("cursor", in.TenantID, in.Cursor)
	if err != nil {
		return nil, err
	}
	kinds, err := Readable(ctx, q, reqctx.PrincipalFrom(ctx), in.TenantID)
	if err != nil {
		return nil, err
	}
	if in.Cursor != "" {
		if err := events.CheckCursor(ctx, q, "cursor", in.TenantID, after); err != nil {
			return nil, err
		}
	}
	list, err := events.Page(ctx, q, events.Filter{TenantID: in.TenantID, Types: types, Resources: kinds}, after, in.Limit+1)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(list, in.Limit, func(e events.Event) string { return e.EventID })
	return &page.Page[events.Event]{Items: items, Cursor: cur}, nil
}

// Schemas of the event's fields that have no Go type to reflect here.
var (
	_ = registry.DefineSchemaOf[events.Event]("TenantEvent")
	_ = registry.DefineSchema("EventData", `{"type": "object", "additionalProperties": true,
		"description": "the resource as of the event, in its method-surface form: an Instance (instance.*), a ComputeNode (node.*), a JoinRequest (joinRequest.*), a Workflow without its profileDocument and its steps' with, which never change (workflow.*), a Reservation (reservation.*); inventory.changed: {nodeId, snapshotId, previousSnapshotId, changes}, the diff's changes against the node's previous snapshot (previousSnapshotId; for a node's first snapshot previousSnapshotId is null and changes empty)"}`)
)

// Group describes the events group.
var Group = registry.Group{Name: "events", Summary: "A tenant's event stream: every change a dashboard watches (instances, nodes and their inventory, join requests, workflows, reservations), one stream per tenant in commit order, kept for the event retention (`COMPUTE_EVENT_RETENTION`). The same events arrive live through the graph's `tenantEvents` subscription. See [Events](../guides/events.md)."}

// Methods are the events group's registry entries.
func Methods() []registry.Method {
	typ := registry.Field{Name: "type", Type: registry.String, MaxLength: 64, Pattern: TypePattern}
	return []registry.Method{
		registry.Def(registry.Method{Group: "events", Name: "list", Kind: registry.Read, Items: true,
			Summary: "Returns a page of the tenant's events the caller reads, oldest first, optionally of some types.",
			Notes: []string{"Decided as `compute:tenants:read` on the tenant; the page holds the events of the resources the caller reads: `instance.*` and `reservation.*` with `compute:instances:read`, `node.*` and `inventory.changed` with `compute:nodes:read`, `joinRequest.*` with `compute:joinTokens:read`, `workflow.*` with `compute:workflows:read`.",
				"`types` keeps the events of those types: an entry is an event type (`node.cordoned`) or a prefix ending in `.` (`node.`); an unknown type is `INVALID_INPUT`; none, or an empty list, keeps every type.",
				"Events are in the tenant's commit order: an event appears once the change that wrote it has committed, after every event already listed, never before one. `limit` defaults to 50 and is at most 200; pass the returned cursor (the last event's id) to read the next page. The cursor is `null` on the last page: to poll on, pass the `eventId` of the last event read.",
				"A cursor that retention has overtaken (events after it are gone, being older than the event retention), or issued before the per-tenant streams (an `instance.*` event id of an earlier version), is `INVALID_STATE` with `details.reason: \"expired-cursor\"`: start again without a cursor. The id of the last event pruned still reads on: nothing after it is gone. A cursor of another tenant's stream is `INVALID_INPUT`."},
			Permission: Permission, Resource: authz.Tenant, Module: "core", Phase: "v0.2",
			Input: []registry.Field{registry.TenantID(),
				{Name: "types", Type: registry.Array, MaxItems: MaxTypes, Items: &typ, Description: "event types, or prefixes ending in `.`"},
				registry.PageLimit(), registry.Cursor()}}, nil, List),
	}
}
