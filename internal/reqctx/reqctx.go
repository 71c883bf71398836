// Package reqctx carries per-request values: the request id and the caller.
package reqctx

import (
	"context"
	"sync"
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

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller, nil when unauthenticated.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// WithRequestID returns ctx carrying the request id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id, empty outside a request.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
