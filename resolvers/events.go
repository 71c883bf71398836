package resolvers

import (
	"context"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/live"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Querier and Principal name what a subscription's decision reads.
type (
	Querier   = store.Q
	Principal = *reqctx.Principal
)

// resumeAfter is the document's after, or nil when the stream resumes
// after its Last-Event-ID instead (subscribe reads it): an after the header
// replaces is not read at all.
func resumeAfter(ctx context.Context, after *string) *string {
	if reqctx.LastEventID(ctx) != "" {
		return nil
	}
	return after
}

// decideFunc decides a subscription for a principal and returns the filter
// of the events it delivers.
type decideFunc func(ctx context.Context, db Querier, p Principal) (events.Filter, error)

// subscribe decides a subscription, starts it on this replica's hub, and
// decides it again whenever the caller's role bindings change: a refusal
// ends it with that error, a narrower or wider reach changes its filter.
// The cursor (the document's after, resumeAfter) is read once the caller
// may read the stream, as the methods read theirs after their decision: a
// caller with no role on the tenant is PERMISSION_DENIED whatever cursor
// it sends (it was INVALID_INPUT here, PERMISSION_DENIED on the methods).
func (r *subscriptionResolver) subscribe(ctx context.Context, cursor *string, decide decideFunc) (<-chan *events.Event, error) {
	setup, done := reqctx.Setup(ctx) // the start's deadline, not the subscription's
	f, err := decide(setup, r.DB, reqctx.PrincipalFrom(ctx))
	done()
	if err != nil {
		return nil, err
	}
	var after *uint64
	if cursor != nil && *cursor != "" {
		seq, err := events.ParseCursor("after", f.TenantID, *cursor)
		if err != nil {
			return nil, err
		}
		after = &seq
	}
	var subp atomic.Pointer[live.Subscription]
	opts := live.Options{OnEnd: func(err error) { reqctx.SetEnd(ctx, err) }}
	if id := reqctx.LastEventID(ctx); id != "" {
		// An event stream its client reconnected (an EventSource sends the
		// id of the last event it received) resumes after that event in
		// place of the document's after (resumeAfter).
		seq, err := events.ParseCursor(reqctx.LastEventIDHeader, f.TenantID, id)
		if err != nil {
			return nil, err
		}
		after, opts.CursorPath = &seq, reqctx.LastEventIDHeader
	}
	if s := reqctx.SessionFrom(ctx); s != nil {
		opts.OnChange = s.OnChange
		opts.Recheck = func(ctx context.Context) error {
			p, err := s.Principal(ctx)
			if err != nil {
				return err
			}
			f, err := decide(ctx, r.DB, p)
			if err != nil {
				return err
			}
			if sub := subp.Load(); sub != nil {
				sub.SetFilter(f)
			}
			return nil
		}
	}
	d := reqctx.DriverFrom(ctx)
	if d != nil {
		ready := d.Ready()
		opts.OnReady = func(ev *events.Event) {
			if ev == nil {
				ready(nil)
				return
			}
			ready(ev)
		}
	}
	sub, err := r.Live.Subscribe(ctx, f, after, opts)
	if err != nil {
		return nil, err
	}
	subp.Store(sub)
	if d != nil {
		d.Attach(func() { <-sub.C })
	}
	return sub.C, nil
}

// instanceFields are an instance event's fields (never nil: an event whose
// data did not decode shows empty ones).
func instanceFields(ev *events.Event) *events.InstanceFields {
	if ev.Instance != nil {
		return ev.Instance
	}
	return &events.InstanceFields{}
}

// loadLink reads an event's resource through the request's loader; in a
// subscription past its cache, so each event shows the resource as it is
// when the event is sent.
func loadLink[V any](ctx context.Context, l *loaders.L[string, V], id string) (V, error) {
	if oc := graphql.GetOperationContext(ctx); oc != nil && oc.Operation != nil && oc.Operation.Operation == ast.Subscription {
		return loaders.Fresh(ctx, l, id)
	}
	return l.Load(ctx, id)()
}
