package auth

import (
	"context"
	"errors"

	"github.com/bettercompute/computed/internal/errs"
)

// Failed authentications: a credential presented that authenticates no
// one, whether a bearer token (Authenticate) or a credential a method
// takes in its input (nodes.join's join token: unknown, revoked, expired
// or used up). The contract throttles them per client address, by one
// rule: each failure takes one token of the address's budget after the
// lookup said no, and one that finds the budget spent is answered
// RATE_LIMITED instead. A credential that authenticates spends nothing.
// The server owns the budget (shared by the replicas) and puts it in the
// request's context (WithThrottle); the bearer check and the registry,
// for a method's failure, charge it through Charge.

// failure marks a refusal as a failed authentication; errs.As still finds
// the refusal itself.
type failure struct{ err *errs.Error }

func (f failure) Error() string { return f.err.Error() }
func (f failure) Unwrap() error { return f.err }

// Failed marks e, an UNAUTHENTICATED refusal, as a failed authentication
// of the credential presented (Charge counts it).
func Failed(e *errs.Error) error { return failure{e} }

// IsFailed reports whether err is a failed authentication (Failed).
func IsFailed(err error) bool {
	var f failure
	return errors.As(err, &f)
}

// Throttle charges one failed authentication to the budget of the
// request's client address: nil while the budget lasts, the refusal to
// answer instead (RATE_LIMITED) once it is spent.
type Throttle func(ctx context.Context) error

type throttleKey struct{}

// WithThrottle returns ctx with the throttle its failed authentications
// are charged to.
func WithThrottle(ctx context.Context, t Throttle) context.Context {
	return context.WithValue(ctx, throttleKey{}, t)
}

// Charge returns what a caller is answered for err: a failed
// authentication (Failed) is charged to the throttle of ctx, and answered
// with the throttle's refusal when the budget is spent; any other error,
// and any error without a throttle in ctx (tests that call the registry
// directly), passes as it is.
func Charge(ctx context.Context, err error) error {
	if err == nil || !IsFailed(err) {
		return err
	}
	t, _ := ctx.Value(throttleKey{}).(Throttle)
	if t == nil {
		return err
	}
	if refused := t(ctx); refused != nil {
		return refused
	}
	return err
}
