// Package auditlist is the audit group of the method registry: audit.list,
// a tenant's audit trail newest first. The records, their one visibility
// predicate and their batch reads are package audit's (the registry writes
// records through it, so the method lives apart from it).
package auditlist

import (
	"context"
	"time"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/rfc3339"
	"github.com/bettercompute/computed/internal/store"
)

// Schemas of the record and of its fields that have no Go type to reflect.
var (
	_ = registry.DefineSchemaOf[audit.Record]("AuditRecord")
	_ = registry.DefineSchemaOf[audit.Actor]("AuditPrincipal")
	_ = registry.DefineSchemaOf[audit.Resource]("AuditResource")
	_ = registry.DefineEnum("AuditPrincipalKind",
		"who acted: a principal of the principals table (operator, user, service, node), the system's own workers (system: the vps.instances reconciler, the audit retention), a join token presented to nodes.join (join-token), or unknown (records written before principals were kept)",
		audit.KindOperator, audit.KindUser, audit.KindService, audit.KindNode, audit.KindSystem, audit.KindJoinToken, audit.KindUnknown)
	_ = registry.DefineSchema("AuditDetail", `{"type": ["object", "null"], "additionalProperties": true,
		"description": "what the method keeps with its record: the ids its input names besides the tenant and the resource (the join request an approval is about, the principal a grant binds), the ids a create generated (a join token, a service token and its principal, a workflow, a reservation, an expected machine, a profile version, a deferred join's request or challenge), the endorsement key an allow-list change is about, the ids a refusal names (the join request of a denied join's retry), a denial's reason; for audit.prune, deleted and before; null when nothing"}`)
)

// ListInput is audit.list's input.
type ListInput struct {
	TenantID    string  `json:"tenantId"`
	ResourceID  *string `json:"resourceId,omitempty"`
	PrincipalID *string `json:"principalId,omitempty"`
	Method      *string `json:"method,omitempty"`
	Since       *string `json:"since,omitempty"`
	Until       *string `json:"until,omitempty"`
	Limit       int     `json:"limit"`
	Cursor      string  `json:"cursor,omitempty"`
}

func parseTime(path string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := rfc3339.FieldExact(path, *s) // audit.NewFilter rounds it up
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// List pages the tenant's records newest first, through the graph's batch
// read with the one tenant the decision named.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[audit.Record], error) {
	since, err := parseTime("since", in.Since)
	if err != nil {
		return nil, err
	}
	until, err := parseTime("until", in.Until)
	if err != nil {
		return nil, err
	}
	f, err := audit.NewFilter(in.TenantID, in.ResourceID, in.PrincipalID, in.Method, since, until)
	if err != nil {
		return nil, err
	}
	var after string
	if _, err := audit.Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows, err := audit.Page(ctx, q, authz.TenantScope(in.TenantID), f, after, in.Limit)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(rows, in.Limit, func(r audit.Record) string { return audit.Cursors.Encode(audit.CursorKey(&r)) })
	return &page.Page[audit.Record]{Items: items, Cursor: cur}, nil
}

// Group describes the audit group.
var Group = registry.Group{Name: "audit", Summary: "The audit trail: a record of every mutation attempt that reached a decision (successes and failures, `PERMISSION_DENIED` included), of every move the `vps.instances` reconciler makes, of every retention run and of every use of a revoked bearer token (in its principal's home tenant: outcome `UNAUTHENTICATED`, method the one called, `graphql` on the graph's endpoints and `unknown` on other paths, `detail.tokenId`), naming the tenant, the principal as it was (id, kind, name, and its home tenant: another tenant's when its principal called on this one), the method, the resource (type, id), the outcome (`success` or the error code), the request id, the client address and the time. Reads are not recorded (but a revoked token's are). Records are append-only and kept for `COMPUTE_AUDIT_RETENTION` (400 days by default). Tenant admins read their tenant's records; the operator reads every tenant's, and the platform's under the reserved tenant id `@platform`."}

// Methods are the audit group's registry entries.
func Methods() []registry.Method {
	tenant := registry.TenantID()
	tenant.Pattern = `^(?:[A-Za-z0-9._:-]{1,128}|@platform)$`
	tenant.Description = "the tenant whose records to read; `@platform` (the operator only) holds the records of no tenant"
	text := func(name, desc string) registry.Field {
		return registry.Field{Name: name, Type: registry.String, MaxLength: 256, Pattern: `^[\x21-\x7E]{1,256}$`, Description: desc}
	}
	timeField := func(name, desc string) registry.Field {
		return registry.Field{Name: name, Type: registry.String, MaxLength: 64, Description: desc}
	}
	return []registry.Method{
		registry.Def(registry.Method{Group: "audit", Name: "list", Kind: registry.Read,
			Summary: "Returns a page of the tenant's audit records, newest first, optionally of one resource, one principal, one method or a time window.",
			Notes: []string{"Decided as `compute:audit:read` on the tenant, which admins hold (members, viewers and node credentials do not); the operator reads every tenant's.",
				"A record belongs to the tenant the call named, whether or not its caller holds a role there (so a tenant's admins see others probing it), or, for calls naming none, to the tenant of the credential's join token, or else the credential's own tenant (a node's, a service token's, a user's home tenant: an admin token refused `inventory.report` is in its tenant's trail); `tenants.create` belongs to the tenant it names. A call naming a tenant that does not exist, and a join with an unknown token, are the platform's (`@platform`).",
				"`outcome` is `success` or the error code. `principal.kind` is `operator`, `user`, `service`, `node`, `system` (the reconciler, `vps.instances.<state>` records; the retention, `audit.prune` records) or `join-token` (`nodes.join`, whose token is the credential).",
				"`since` is inclusive and `until` exclusive (RFC 3339 times); `until` must be after `since` (`INVALID_INPUT`).",
				"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next (older) page."},
			Permission: authz.AuditRead, Resource: authz.Tenant, Module: "core", Phase: "v0.2",
			Input: []registry.Field{tenant,
				text("resourceId", "only records about this resource (its id: a pool, node, project, instance or profile id, or a tenant id)"),
				text("principalId", "only records of this principal (`prn_…`, a join token's `jtok_…`, or `system:vps.instances`)"),
				{Name: "method", Type: registry.String, MaxLength: 128, Pattern: `^(?:[A-Za-z]+(?:\.[A-Za-z]+)+|graphql|unknown)$`, Description: "only records of this method (`instances.stop`; `graphql` or `unknown` for a revoked token's uses)"},
				timeField("since", "RFC 3339; only records at or after it"),
				timeField("until", "RFC 3339; only records before it"),
				registry.PageLimit(), registry.Cursor()}}, nil, List),
	}
}
