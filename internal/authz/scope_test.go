package authz

import (
	"reflect"
	"testing"

	"github.com/bettercompute/computed/internal/reqctx"
)

// The zero Scope reads nothing: bound as an SQL parameter it is an empty
// text[] (a nil slice would bind as NULL, which Where reads as every
// tenant), and loaders skip it.
func TestZeroScopeFailsClosed(t *testing.T) {
	var s Scope
	if got := s.Arg(); !reflect.DeepEqual(got, []string{}) {
		t.Fatalf("the zero Scope binds as %#v", got)
	}
	if !s.Nothing() || s.Has("acme") {
		t.Fatal("the zero Scope reads something")
	}
	if got := TenantScope("acme").Arg(); !reflect.DeepEqual(got, []string{"acme"}) {
		t.Fatalf("TenantScope binds as %#v", got)
	}
	op := (&Caller{P: &reqctx.Principal{ID: "op", Kind: "operator"}}).Scope(TenantsRead)
	if op.Arg() != nil || op.Nothing() || !op.Has("anything") {
		t.Fatalf("the operator's scope: %#v", op)
	}
	// Without bindings: only the builtin tenant's reads (its shipped profiles).
	none := (&Caller{P: &reqctx.Principal{ID: "u", Kind: "service"}}).Scope(TenantsRead)
	if none.Has("acme") || none.Nothing() {
		t.Fatalf("a principal without bindings: %#v", none)
	}
}
