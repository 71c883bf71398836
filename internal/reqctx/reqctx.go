// Package reqctx carries per-request values: the request id and the caller.
package reqctx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Principal is the authenticated caller.
type Principal struct {
	ID       string
	Kind     string // operator, user, service, node
	TenantID string // home tenant; empty for the operator
	Name     string
	TokenID  string
	NodeID   string // for node principals

	mu       sync.Mutex
	roles    map[string]string // tenantId -> role, memoised per request
	allRoles bool              // roles holds every binding of the principal
	tenants  map[string]BoundTenant
}

// BoundTenant is a tenant the principal holds a role on, as authentication
// read it with the bindings (in the same statement as the token).
type BoundTenant struct {
	Name      string
	CreatedAt time.Time
}

// SetBoundTenants memoises the tenants of the principal's bindings for the
// request.
func (p *Principal) SetBoundTenants(t map[string]BoundTenant) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tenants = t
}

// BoundTenant returns a tenant authentication read with the bindings.
func (p *Principal) BoundTenant(id string) (BoundTenant, bool) {
	if p == nil {
		return BoundTenant{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tenants[id]
	return t, ok
}

// IsOperator reports the platform-wide operator.
func (p *Principal) IsOperator() bool { return p != nil && p.Kind == "operator" }

// CachedRole returns a memoised role lookup.
func (p *Principal) CachedRole(tenantID string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.roles[tenantID]
	if !ok && p.allRoles {
		return "", true
	}
	return r, ok
}

// CacheAllRoles memoises every binding of the principal for the request.
func (p *Principal) CacheAllRoles(roles map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.roles, p.allRoles = roles, true
}

// AllRoles returns every binding of the principal when the request has
// loaded them all.
func (p *Principal) AllRoles() (map[string]string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.roles, p.allRoles
}

// CacheRole memoises a role lookup for the rest of the request.
func (p *Principal) CacheRole(tenantID, role string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.roles == nil {
		p.roles = map[string]string{}
	}
	p.roles[tenantID] = role
}

type principalKey struct{}
type requestIDKey struct{}
type clientAddrKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller, nil when unauthenticated.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// WithRequestID returns ctx carrying the request id, and the request's
// record of what it has logged once (LogOnce).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(context.WithValue(ctx, requestIDKey{}, id), onceKey{}, &sync.Map{})
}

type onceKey struct{}

// LogOnce says whether the request has not logged what key names yet, and
// records that it now has: a failure every field of a request meets (its
// deadline) is logged once, not once per field. Outside a request, always
// true.
func LogOnce(ctx context.Context, key string) bool {
	m, _ := ctx.Value(onceKey{}).(*sync.Map)
	if m == nil {
		return true
	}
	_, logged := m.LoadOrStore(key, true)
	return !logged
}

// RequestID returns the request id, empty outside a request.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// WithClientAddr returns ctx carrying the client address: the one the
// rate limits used for the request (the server's middleware sets it), which
// the audit trail records.
func WithClientAddr(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientAddrKey{}, addr)
}

// ClientAddr returns the request's client address, empty outside a request
// (the reconciler, a periodic job).
func ClientAddr(ctx context.Context) string {
	a, _ := ctx.Value(clientAddrKey{}).(string)
	return a
}

// CallerKey is whom a request's rate is counted against (the rate limit):
// p's token, or the client's address without one.
func CallerKey(ctx context.Context, p *Principal) string {
	if p != nil && p.TokenID != "" {
		return p.TokenID
	}
	if a := ClientAddr(ctx); a != "" {
		return "ip:" + a
	}
	return "ip:unknown"
}

// ShareKey is whom a request's share of the replica's places is counted
// against (the GraphQL execution slots, the database pool's connections,
// package fair): the tenant of a tenant's credential (its users',
// services' and nodes' tokens share one), else CallerKey (the operator's
// token, an address). Shares kept per token, a tenant that made a dozen
// tokens held every slot of a replica and made another tenant's query wait
// 15 s (a probe's).
func ShareKey(ctx context.Context, p *Principal) string {
	if p != nil && p.TenantID != "" && !p.IsOperator() {
		return "tenant:" + p.TenantID
	}
	return CallerKey(ctx, p)
}

// Detach returns a context without ctx's deadline, cancelation or other
// values that keeps what identifies the request (its id and client
// address): a WebSocket's operations outlive the upgrade request.
func Detach(ctx context.Context) context.Context {
	out := WithRequestID(context.Background(), RequestID(ctx))
	if a := ClientAddr(ctx); a != "" {
		out = WithClientAddr(out, a)
	}
	return out
}

// Session is a long-lived connection's hold on its credential (a
// WebSocket, an event stream), for operations that outlive a request.
type Session interface {
	// OnChange registers f, called (on a goroutine of the session's, so
	// briefly) whenever the principal's role bindings may have changed;
	// stop unregisters it.
	OnChange(f func()) (stop func() bool)
	// Principal authenticates the connection's token again.
	Principal(ctx context.Context) (*Principal, error)
}

type sessionKey struct{}
type endKey struct{}

// WithSession returns ctx carrying the connection's session.
func WithSession(ctx context.Context, s Session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

// SessionFrom returns the connection's session, nil outside one.
func SessionFrom(ctx context.Context) Session {
	s, _ := ctx.Value(sessionKey{}).(Session)
	return s
}

type endSlot struct {
	mu  sync.Mutex
	err error
}

// WithEnd returns ctx with a slot for the error a streaming operation ends
// with, and a function that reads it.
func WithEnd(ctx context.Context) (context.Context, func() error) {
	s := &endSlot{}
	return context.WithValue(ctx, endKey{}, s), func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.err
	}
}

// SetEnd records why a streaming operation ended (no-op without a slot).
func SetEnd(ctx context.Context, err error) {
	if s, ok := ctx.Value(endKey{}).(*endSlot); ok {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
}

// Driver is a transport's offer to drive a subscription by events instead
// of holding a goroutine blocked on its channel (the WebSocket transport
// makes it). A subscription resolver that accepts has its source call
// Ready's function once after every item it puts in the channel it returns
// (with that item) and once after closing it (with nil), and calls Attach
// once it has subscribed, with a function that takes one item from the
// channel. The transport then takes exactly one item per ready call, so its
// reads never block; and since one item may go to many subscriptions, it
// may render an item once for all operations alike (same document,
// variables and principal) and take the others' copies with skip.
type Driver interface {
	Ready() func(item any)
	Attach(skip func())
}

type driverKey struct{}

// WithDriver returns ctx carrying the transport's driver.
func WithDriver(ctx context.Context, d Driver) context.Context {
	return context.WithValue(ctx, driverKey{}, d)
}

// DriverFrom returns the transport's driver, nil when it has none.
func DriverFrom(ctx context.Context) Driver {
	d, _ := ctx.Value(driverKey{}).(Driver)
	return d
}

// LastEventIDHeader is the header an event stream's client reconnects with,
// naming the last event it received.
const LastEventIDHeader = "Last-Event-ID"

type lastEventKey struct{}

// WithLastEventID returns ctx carrying the id of the last event a
// reconnecting event stream's client received (its Last-Event-ID header).
func WithLastEventID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, lastEventKey{}, id)
}

// LastEventID is the id WithLastEventID put in ctx, "" when none.
func LastEventID(ctx context.Context) string {
	id, _ := ctx.Value(lastEventKey{}).(string)
	return id
}

type admittedKey struct{}

// WithAdmitted returns ctx saying its request has paid the first unit of
// its budget already (GraphQL over HTTP pays before its body is read).
func WithAdmitted(ctx context.Context) context.Context {
	return context.WithValue(ctx, admittedKey{}, true)
}

// Admitted says WithAdmitted marked ctx.
func Admitted(ctx context.Context) bool {
	ok, _ := ctx.Value(admittedKey{}).(bool)
	return ok
}

type setupKey struct{}

// WithSetupDeadline returns ctx saying that a subscription's start (its
// decision, its cursor's check, its stream's first reads) must be done by
// t, the operation's deadline, which the subscription itself outlives: a
// start waiting on a frozen database is answered when the deadline passes,
// as a query would be, not when the database comes back.
func WithSetupDeadline(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, setupKey{}, t)
}

// Setup returns ctx bounded by the deadline WithSetupDeadline put in it
// (ctx itself, with a no-op cancel, when none): for the start's calls only.
func Setup(ctx context.Context) (context.Context, context.CancelFunc) {
	if t, ok := ctx.Value(setupKey{}).(time.Time); ok {
		return context.WithDeadline(ctx, t)
	}
	return ctx, func() {}
}

type readBudgetKey struct{}

// WithReadBudget gives the request a budget of n bytes of the large values
// it may read (profile documents, workflows' snapshots, inventory
// sections), across all its statements (store.SelectSpending spends it).
func WithReadBudget(ctx context.Context, n int64) context.Context {
	b := new(atomic.Int64)
	b.Store(n)
	return context.WithValue(ctx, readBudgetKey{}, b)
}

// Spend takes n bytes from the request's read budget and says whether it
// held them; a context without a budget (a job, a test) is not bounded.
func Spend(ctx context.Context, n int) bool {
	b, _ := ctx.Value(readBudgetKey{}).(*atomic.Int64)
	return b == nil || b.Add(-int64(n)) >= 0
}
