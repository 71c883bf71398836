// Package audit is the audit trail: one record per mutation attempt that
// reached a decision (successes in the mutation's own transaction, failures
// after its rollback), per reconciler move and per retention run. A record
// names its tenant, the principal as it was (id, kind, display name), the
// method, the resource (type and id), the outcome ("success" or the error
// code), the request id, the client address the rate limits used, and the
// time. Records are append-only: the table's trigger refuses UPDATE, DELETE
// and TRUNCATE, except the retention pruner's deletes (Prune).
//
// Readers hold compute:audit:read on the record's tenant (admins, and the
// operator for every tenant): Visible is the one predicate, used by
// audit.list and the graph's auditLog connections alike.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// PlatformTenant is where records that belong to no tenant live: the
// pruning itself, a join with an unknown join token, and calls naming a
// tenant that does not exist (recording those under the id they named
// would hand them to whoever creates that tenant later, and let anyone
// write records under any id). '@' is outside the tenant id pattern, so no
// tenant can take it; only the operator reads it.
const PlatformTenant = authz.PlatformTenant

// Success is the outcome of a mutation that committed.
const Success = "success"

// Principal kinds: the principals table's (operator, user, service,
// node), the system's own workers, a join token presented to nodes.join,
// and unknown (records from before principals were kept).
const (
	KindOperator  = "operator"
	KindUser      = "user"
	KindService   = "service"
	KindNode      = "node"
	KindSystem    = "system"
	KindJoinToken = "join-token"
	KindUnknown   = "unknown"
)

// Actor is who a record says acted: the principal as it was at the time.
type Actor struct {
	PrincipalID *string `json:"principalId" db:"principal_id" doc:"Null when the credential named no one (an unknown join token)."`
	Kind        string  `json:"kind" db:"principal_kind" schema:"AuditPrincipalKind" doc:"What kind of principal acted (system: the server itself, as the reconciler and retention jobs)."`
	Name        string  `json:"name" db:"principal_name" doc:"The principal's name at the time."`
	// TenantID is the principal's home tenant: a user's, a service
	// token's, a node's; null for the operator, the server and join
	// tokens (and in records written before it was kept).
	TenantID *string `json:"tenantId" db:"principal_tenant_id" doc:"The principal's home tenant (a user's, a service token's, a node's): another tenant's when its principal called on this one. Null for the operator, the server itself and join tokens, and in records written before it was kept."`
}

// Resource is what a record is about: an authorization resource type
// (compute-tenant, compute-pool, ...) and its id.
type Resource struct {
	Type string `json:"type" db:"resource_type" doc:"The authorization resource type (compute-tenant, compute-pool, compute-instance, ...)."`
	ID   string `json:"id" db:"resource_id" doc:"The resource's id."`
}

// Record is one audit record as readers get it.
type Record struct {
	AuditID       string          `json:"auditId" db:"audit_id" doc:"The record's id (aud_ and a ULID)."`
	TenantID      string          `json:"tenantId" db:"tenant_id" doc:"The tenant the call named (or, naming none, the tenant of the credential's join token, or else the credential's own tenant: a node's, a service token's, a user's home tenant)."`
	Principal     Actor           `json:"principal" db:"-" doc:"Who acted, as the principal was at the time."`
	Method        string          `json:"method" db:"method" doc:"The method, as on the method surface (instances.stop); vps.instances.<state> for the reconciler's moves; for a revoked token's use, the method it called, graphql on the graph's endpoints and sockets, unknown elsewhere."`
	Resource      Resource        `json:"resource" db:"-" doc:"What the call was about."`
	Outcome       string          `json:"outcome" db:"outcome" doc:"success, or the error code the call ended with (PERMISSION_DENIED, NOT_FOUND, ...)."`
	RequestID     string          `json:"requestId" db:"request_id" doc:"The request's X-Request-Id (job-<id> for the reconciler)."`
	ClientAddress *string         `json:"clientAddress" db:"client_addr" doc:"The client address the rate limits used; null for records made without a request."`
	OccurredAt    time.Time       `json:"occurredAt" db:"occurred_at" doc:"When the call was recorded."`
	Detail        json.RawMessage `json:"detail" db:"-" schema:"AuditDetail" doc:"What the method keeps with its record: the ids its input names besides the tenant and the resource, a denial's reason; for a revoked token's use, tokenId and reason revoked-token."`
	DetailText    *string         `json:"-" db:"detail"`
}

func (r *Record) fix() {
	r.OccurredAt = r.OccurredAt.UTC()
	r.Detail = nil
	if r.DetailText != nil {
		r.Detail = json.RawMessage(*r.DetailText)
	}
}

// DetailValue is the detail as a JSON value for the graph (null when none).
func (r *Record) DetailValue() any {
	if r.Detail == nil {
		return nil
	}
	return r.Detail
}

// Entry is a record to write. The principal, the request id and the client
// address come from the context; Actor overrides the principal (a join
// token, which is no principal).
type Entry struct {
	// TenantID is the record's tenant: the tenant the call named (or the
	// resource's, for calls naming none). A tenant that does not exist is
	// recorded under PlatformTenant.
	TenantID string
	Method   string
	Resource Resource
	Outcome  string
	Detail   []byte // a JSON object, or nil
	Actor    *Actor
}

// ActorOf is the record's view of a principal.
func ActorOf(p *reqctx.Principal) Actor {
	if p == nil {
		return Actor{Kind: KindUnknown}
	}
	id := p.ID
	a := Actor{PrincipalID: &id, Kind: p.Kind, Name: p.Name}
	if p.TenantID != "" {
		home := p.TenantID
		a.TenantID = &home
	}
	return a
}

// Write appends one record on q: the mutation's transaction for
// successes (the record commits with the change, or neither does; it is
// sent with the transaction's COMMIT, store.ExecAtCommit, so it costs the
// mutation no round trip of its own), the pool for failures.
func Write(ctx context.Context, q store.Q, e Entry) error {
	a := ActorOf(reqctx.PrincipalFrom(ctx))
	if e.Actor != nil {
		a = *e.Actor
	}
	var addr *string
	if s := reqctx.ClientAddr(ctx); s != "" {
		addr = &s
	}
	var detail *string
	if e.Detail != nil {
		s := string(e.Detail)
		detail = &s
	}
	err := store.ExecAtCommit(ctx, q, `
		INSERT INTO audit_log (tenant_id, audit_id, principal_id, principal_kind, principal_name, method,
			resource_type, resource_id, outcome, request_id, client_addr, detail, principal_tenant_id)
		VALUES (COALESCE((SELECT tenant_id FROM tenants WHERE tenant_id = $1), '`+PlatformTenant+`'),
			$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13)`,
		e.TenantID, ids.New(ids.Audit), a.PrincipalID, a.Kind, a.Name, e.Method,
		e.Resource.Type, e.Resource.ID, e.Outcome, reqctx.RequestID(ctx), addr, detail, a.TenantID)
	return store.Wrap(err)
}

// Visible is the one visibility predicate over audit_log a: a record is
// read by the principals holding compute:audit:read on its tenant (the
// tenants of the text[] expression tenants; every tenant for the operator).
func Visible(tenants string) string { return `a.tenant_id = ANY(` + tenants + `)` }

// --- reading -----------------------------------------------------------

// Parent names what a page of records hangs off.
type Parent string

// Parents of record pages: a tenant's whole trail, or one resource's
// records (an instance's, a pool's, a node's) in the tenants the caller
// reads.
const (
	OfTenant   Parent = "tenant"
	OfInstance Parent = authz.Instance
	OfPool     Parent = authz.Pool
	OfNode     Parent = authz.Node
)

// Filter is one parent's page with audit.list's filters. Since and Until
// are RFC 3339 times ("" for none): since inclusive, until exclusive.
type Filter struct {
	Parent      string
	ResourceID  string
	PrincipalID string
	Method      string
	Since       string
	Until       string
	// Counted asks for the filter's total (the graph's totalCount, when
	// selected): a count reads every retained record of the filter, a
	// tenant's 400 days of them, and a page that does not show it should
	// not pay for it.
	Counted bool
}

const sep = "\x1f"

// Key encodes a filter as one loader key.
func (f Filter) Key() string {
	counted := ""
	if f.Counted {
		counted = "1"
	}
	return strings.Join([]string{f.Parent, f.ResourceID, f.PrincipalID, f.Method, f.Since, f.Until, counted}, sep)
}

// ParseFilter decodes Key.
func ParseFilter(k string) Filter {
	p := strings.SplitN(k, sep, 7)
	for len(p) < 7 {
		p = append(p, "")
	}
	return Filter{p[0], p[1], p[2], p[3], p[4], p[5], p[6] == "1"}
}

// NewFilter checks a filter's bounds: until must be after since.
func NewFilter(parent string, resourceID, principalID, method *string, since, until *time.Time) (Filter, error) {
	f := Filter{Parent: parent}
	for dst, src := range map[*string]*string{&f.ResourceID: resourceID, &f.PrincipalID: principalID, &f.Method: method} {
		if src != nil {
			*dst = *src
		}
	}
	// Records are timed to the microsecond (PostgreSQL's timestamptz),
	// and a finer bound was rounded to one: a record just before since
	// was listed, one just before until was not. Rounded up, each bound
	// keeps exactly the records at or after since and before until.
	if since != nil {
		f.Since = microsUp(*since).Format(time.RFC3339Nano)
	}
	if until != nil {
		f.Until = microsUp(*until).Format(time.RFC3339Nano)
	}
	if since != nil && until != nil && !until.After(*since) {
		return f, errs.Invalid("until", "until must be after since")
	}
	return f, nil
}

// microsUp is t in UTC, rounded up to the next microsecond when it has a
// finer part.
func microsUp(t time.Time) time.Time {
	t = t.UTC()
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

// Cursors is the kind of the audit lists' cursors (both surfaces), whose
// key is CursorKey's.
const Cursors page.Kind = "audit"

// CursorKey is the sort key of a record as one string (the pages' cursor
// key): its time and id, newest first.
func CursorKey(r *Record) string {
	return r.OccurredAt.UTC().Format(time.RFC3339Nano) + " " + r.AuditID
}

// CheckCursorKey refuses a cursor key that CursorKey did not make
// (INVALID_INPUT at path).
func CheckCursorKey(path, k string) error {
	_, _, err := parseCursorKey(k)
	if err != nil {
		return errs.Invalid(path, "%s is not a cursor this server returned", path)
	}
	return nil
}

// parseCursorKey splits a cursor key; empty means the first page.
func parseCursorKey(k string) (*time.Time, string, error) {
	if k == "" {
		return nil, "", nil
	}
	ts, id, ok := strings.Cut(k, " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	// As CursorKey writes it: UTC, to the microsecond a record holds, no
	// other offset or finer digits (0001-01-01 or a +02:00 offset read as
	// a place no record is).
	if !ok || err != nil || !ids.Valid(ids.Audit, id) || t.UTC().Format(time.RFC3339Nano) != ts || t.Nanosecond()%1000 != 0 || t.Year() < 2000 {
		return nil, "", errs.Invalid("cursor", "cursor is not one this server returned")
	}
	return &t, id, nil
}

func filterArrays(keys []string) (parent, resource, principal, method, since, until []string, counted []bool) {
	for _, k := range keys {
		f := ParseFilter(k)
		parent, resource, principal = append(parent, f.Parent), append(resource, f.ResourceID), append(principal, f.PrincipalID)
		method, since, until = append(method, f.Method), append(since, f.Since), append(until, f.Until)
		counted = append(counted, f.Counted)
	}
	return
}

// shape is which of a filter's fields are set: a statement is written for
// its keys' shape, each set field an equality an index can serve. Written
// as "(t.f_method = ” OR a.method = t.f_method)" for every key, a filter
// on a method, resource or principal read a tenant's whole trail through
// its time index (the graph: 0.5-1.2 s a page over a million records, a
// 400-day trail past the statement timeout).
// A bound on time is in the shape too: written as a range from -infinity
// to infinity for every key, it made the planner read the trail through
// the time index of every tenant (audit_log_time_idx), a bounded range to
// it, filtering out a million records.
type shape struct{ resource, principal, method, since, until bool }

func (f Filter) shape() shape {
	return shape{resource: f.ResourceID != "", principal: f.PrincipalID != "", method: f.Method != "",
		since: f.Since != "", until: f.Until != ""}
}

// split parts keys into those read together in one statement over unnest
// (unfiltered, two or more: each reads through its parent's own index) and
// those each bound as scalars, whose values the planner sees: a filter of
// a field (behind unnest it guessed, and a method filter over several pools
// read their whole trails, 1.2 s over a million records), or the only key.
func split(keys []string) (batched, single []string) {
	for _, k := range keys {
		if ParseFilter(k).shape() == (shape{}) {
			batched = append(batched, k)
		} else {
			single = append(single, k)
		}
	}
	if len(batched) == 1 {
		single, batched = append(single, batched...), nil
	}
	return batched, single
}

// match is the filter of keys t of shape sh over audit_log a, visible in
// the scope at $1.
func match(by Parent, sh shape) string {
	where := `a.tenant_id = t.parent`
	if sh.resource {
		where += ` AND a.resource_id = t.f_resource`
	}
	if by != OfTenant {
		where = `a.resource_id = t.parent AND a.resource_type = '` + string(by) + `'`
	}
	if sh.principal {
		where += ` AND a.principal_id = t.f_principal`
	}
	if sh.method {
		where += ` AND a.method = t.f_method`
	}
	if sh.since {
		where += ` AND a.occurred_at >= t.f_since::timestamptz`
	}
	if sh.until {
		where += ` AND a.occurred_at < t.f_until::timestamptz`
	}
	return where + `
		AND ` + authz.Where("$1", Visible)
}

// keysAt unnests the eight arrays (keys and filterArrays), from parameter
// $n on, as t(k, parent, f_resource, f_principal, f_method, f_since,
// f_until, f_counted).
func keysAt(n int) string {
	return fmt.Sprintf(`unnest($%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::bool[])
		AS t(k, parent, f_resource, f_principal, f_method, f_since, f_until, f_counted)`, n, n+1, n+2, n+3, n+4, n+5, n+6, n+7)
}

// countOf is a key's total, counted only when its filter asks for it (0
// otherwise).
func countOf(by Parent, sh shape) string {
	return `CASE WHEN t.f_counted THEN (SELECT count(*) FROM audit_log a WHERE ` + match(by, sh) + `) ELSE 0 END`
}

const recordCols = `a.audit_id, a.tenant_id, a.principal_id, a.principal_kind, a.principal_name, a.principal_tenant_id, a.method,
	a.resource_type, a.resource_id, a.outcome, a.request_id, a.client_addr, a.occurred_at, a.detail::text AS detail`

type row struct {
	Key   string `db:"parent_key"`
	Total int    `db:"total_count"`
	Record
	actorCols
	Resource
}

// actorCols are Actor's columns (Actor embedded beside Record would hold
// two json names tenantId).
type actorCols struct {
	PrincipalID *string `db:"principal_id"`
	Kind        string  `db:"principal_kind"`
	Name        string  `db:"principal_name"`
	HomeTenant  *string `db:"principal_tenant_id"`
}

func (x *row) record() Record {
	x.Record.Principal = Actor{PrincipalID: x.PrincipalID, Kind: x.Kind, Name: x.Name, TenantID: x.HomeTenant}
	x.Record.Resource = x.Resource
	x.fix()
	return x.Record
}

// Pages returns one page of records, newest first, for each filter key of
// one kind of parent, in one statement, with each key's total when its
// filter is Counted: only the records visible in scope
// (compute:audit:read). after is a CursorKey.
func Pages(ctx context.Context, q store.Q, scope authz.Scope, by Parent, keys []string, after string, limit int) (page.Rows[Record], error) {
	var out page.Rows[Record]
	at, aid, err := parseCursorKey(after)
	if err != nil {
		return out, err
	}
	batched, single := split(keys)
	for _, k := range single {
		f := ParseFilter(k)
		recs, err := pageOf(ctx, q, scope, by, f, at, aid, limit)
		if err != nil {
			return out, err
		}
		total := 0
		if f.Counted && len(recs) > 0 {
			if total, err = countOf1(ctx, q, scope, by, f); err != nil {
				return out, err
			}
		}
		for _, r := range recs {
			out.Parents, out.Totals, out.Items = append(out.Parents, k), append(out.Totals, total), append(out.Items, r)
		}
	}
	if len(batched) == 0 {
		return out, nil
	}
	parent, resource, principal, method, since, until, counted := filterArrays(batched)
	var rows []row
	err = q.SelectContext(ctx, &rows, `WITH t AS MATERIALIZED (
			SELECT t.*, `+countOf(by, shape{})+` AS total_count
			FROM `+keysAt(2)+`)
		SELECT t.k AS parent_key, t.total_count, x.*
		FROM t
		CROSS JOIN LATERAL (SELECT `+recordCols+` FROM audit_log a WHERE `+match(by, shape{})+`
			AND ($10::timestamptz IS NULL OR (a.occurred_at, a.audit_id) < ($10::timestamptz, $11::text))
			ORDER BY a.occurred_at DESC, a.audit_id DESC LIMIT $12) x`,
		scope.Arg(), batched, parent, resource, principal, method, since, until, counted, at, aid, limit+1)
	if err != nil {
		return out, store.Wrap(err)
	}
	for i := range rows {
		x := &rows[i]
		out.Parents, out.Totals, out.Items = append(out.Parents, x.Key), append(out.Totals, x.Total), append(out.Items, x.record())
	}
	return out, nil
}

// Page returns up to limit+1 records of one filter, newest first, after
// the cursor key after, visible in scope: the method surface's read (no
// total).
func Page(ctx context.Context, q store.Q, scope authz.Scope, f Filter, after string, limit int) ([]Record, error) {
	at, aid, err := parseCursorKey(after)
	if err != nil {
		return nil, err
	}
	return pageOf(ctx, q, scope, OfTenant, f, at, aid, limit)
}

// one is a filter bound as scalars from parameter $2 on, as t(parent,
// f_resource, f_principal, f_method, f_since, f_until): the planner sees
// its values and their statistics. Behind unnest it guessed from averages,
// and a principal of a trail mostly another's read the tenant's whole
// trail through its time index (0.8 s over a million records).
const one = `(SELECT $2::text AS parent, $3::text AS f_resource, $4::text AS f_principal, $5::text AS f_method,
			$6::text AS f_since, $7::text AS f_until) t`

func pageOf(ctx context.Context, q store.Q, scope authz.Scope, by Parent, f Filter, at *time.Time, aid string, limit int) ([]Record, error) {
	var rows []row
	err := q.SelectContext(ctx, &rows, `SELECT '' AS parent_key, 0 AS total_count, `+recordCols+`
		FROM `+one+`, audit_log a
		WHERE `+match(by, f.shape())+` AND ($8::timestamptz IS NULL OR (a.occurred_at, a.audit_id) < ($8::timestamptz, $9::text))
		ORDER BY a.occurred_at DESC, a.audit_id DESC LIMIT $10`,
		scope.Arg(), f.Parent, f.ResourceID, f.PrincipalID, f.Method, f.Since, f.Until, at, aid, limit+1)
	out := make([]Record, len(rows))
	for i := range rows {
		out[i] = rows[i].record()
	}
	return out, store.Wrap(err)
}

// countOf1 is one filter's total, bound as scalars (one).
func countOf1(ctx context.Context, q store.Q, scope authz.Scope, by Parent, f Filter) (int, error) {
	var n int
	err := q.GetContext(ctx, &n, `SELECT count(*) FROM `+one+`, audit_log a WHERE `+match(by, f.shape()),
		scope.Arg(), f.Parent, f.ResourceID, f.PrincipalID, f.Method, f.Since, f.Until)
	return n, store.Wrap(err)
}

// Counts counts each key's records (the keys with an empty page), those
// whose filter is Counted.
func Counts(ctx context.Context, q store.Q, scope authz.Scope, by Parent, keys []string) (map[string]int, error) {
	out := make(map[string]int, len(keys))
	batched, single := split(keys)
	for _, k := range single {
		out[k] = 0
		if f := ParseFilter(k); f.Counted {
			n, err := countOf1(ctx, q, scope, by, f)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
	}
	if len(batched) == 0 {
		return out, nil
	}
	parent, resource, principal, method, since, until, counted := filterArrays(batched)
	var rows []struct {
		K string `db:"k"`
		N int    `db:"n"`
	}
	if err := q.SelectContext(ctx, &rows, `SELECT t.k, `+countOf(by, shape{})+` AS n FROM `+keysAt(2),
		scope.Arg(), batched, parent, resource, principal, method, since, until, counted); err != nil {
		return nil, store.Wrap(err)
	}
	for _, r := range rows {
		out[r.K] = r.N
	}
	return out, nil
}

// --- retention ------------------------------------------------------------

// DefaultRetention is how long records are kept unless configured
// (COMPUTE_AUDIT_RETENTION).
const DefaultRetention = 400 * 24 * time.Hour

// pruneBatch bounds one pruning transaction.
const pruneBatch = 10000

// pruner is the principal of the retention job.
var pruner = &reqctx.Principal{ID: "system:audit.prune", Kind: KindSystem, Name: "audit retention"}

// Prune deletes the records that occurred before cutoff, oldest first, in
// transactions of at most 10,000 records; each transaction that deleted
// something also writes the platform record of it (method audit.prune,
// detail {"deleted": n, "before": cutoff}), so a deletion and its record
// commit together. It returns how many records it deleted.
func Prune(ctx context.Context, db *store.DB, cutoff time.Time) (int64, error) {
	ctx = reqctx.WithPrincipal(ctx, pruner)
	if reqctx.RequestID(ctx) == "" {
		ctx = reqctx.WithRequestID(ctx, ids.New("prune"))
	}
	var total int64
	for {
		var n int64
		err := db.Tx(ctx, func(tx *sqlx.Tx) error {
			if err := tx.GetContext(ctx, &n, `SELECT audit_prune($1, $2)`, cutoff, pruneBatch); err != nil {
				return store.Wrap(err)
			}
			if n == 0 {
				return nil
			}
			detail, _ := json.Marshal(map[string]any{"deleted": n, "before": cutoff.UTC().Format(time.RFC3339Nano)})
			return Write(ctx, tx, Entry{TenantID: PlatformTenant, Method: "audit.prune", Outcome: Success,
				Resource: Resource{Type: "audit-log"}, Detail: detail})
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}
