package resolvers

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/instances/graphread"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/page"
)

// Helpers of the instance resolvers (instances.resolvers.go). Visibility is
// the loaders' (their batch SQL decides, package instances); these only
// shape pages.

type scopedLoader[T any] = *loaders.L[loaders.PageKey, *page.Conn[T]]

// scopedPage reads one parent's filtered page, asking for the same page of
// every sibling parent at once.
func scopedPage[T any](ctx context.Context, kind page.Kind, ld scopedLoader[T], parent, view string, poolID, projectID, state *string, first *int, after *string) (*page.Conn[T], error) {
	s, err := graphread.NewScope(parent, poolID, projectID, state)
	if err != nil {
		return nil, err
	}
	n, k, err := pageArgs(kind, first, after)
	if err != nil {
		return nil, err
	}
	loaders.PrefetchScoped(ctx, loaders.From(ctx), ld, s, view, n, k)
	return ld.Load(ctx, loaders.PageKey{Parent: s.Key(), First: n, After: k, View: view})()
}

func instanceConn(ctx context.Context, ld scopedLoader[graphread.View], parent, view string, poolID, projectID, state *string, first *int, after *string) (*model.InstanceConnection, error) {
	c, err := scopedPage(ctx, instances.Cursors, ld, parent, view, poolID, projectID, state, first, after)
	if err != nil {
		return nil, err
	}
	edges, info, total := connection(ctx, instances.Cursors, c, func(v *graphread.View) string { return v.InstanceID },
		func(cur string, v *graphread.View) *model.InstanceEdge {
			return &model.InstanceEdge{Cursor: cur, Node: v}
		})
	return &model.InstanceConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

func reservationConn(ctx context.Context, ld scopedLoader[instances.Reservation], parent, view string, poolID, state *string, first *int, after *string) (*model.ReservationConnection, error) {
	c, err := scopedPage(ctx, instances.ReservationCursors, ld, parent, view, poolID, nil, state, first, after)
	if err != nil {
		return nil, err
	}
	edges, info, total := connection(ctx, instances.ReservationCursors, c, func(r *instances.Reservation) string { return r.ReservationID },
		func(cur string, r *instances.Reservation) *model.ReservationEdge {
			return &model.ReservationEdge{Cursor: cur, Node: r}
		})
	return &model.ReservationConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// changeInput is the typed input of instances.start, stop, reboot and
// delete.
func changeInput(in model.ChangeInstanceInput) *instances.ChangeInput {
	return &instances.ChangeInput{TenantID: in.TenantID, InstanceID: in.InstanceID, ExpectedVersion: in.ExpectedVersion}
}

// changeInstance runs an instance method through the registry (the method
// surface's validation, decision, transaction and audit). The payload is
// the method's answer (the instance as the change left it, before the
// reconciler moves it on), with the links the loader says the caller may
// follow.
func changeInstance[In any](ctx context.Context, r *mutationResolver, method string, in *In) (*graphread.View, error) {
	i, err := call[instances.Instance](ctx, r.Resolver, method, in)
	if err != nil {
		return nil, err
	}
	v, err := loaders.From(ctx).LoadInstanceFresh(ctx, i.InstanceID)
	if err != nil {
		return nil, err
	}
	if v == nil {
		// A caller that may manage it but no longer reads it (a role
		// revoked in between): no links.
		return &graphread.View{Instance: *i}, nil
	}
	out := *v
	out.Instance = *i
	return &out, nil
}

func instancePayload(v *graphread.View, err error) (*model.InstancePayload, error) {
	if err != nil {
		return nil, err
	}
	return &model.InstancePayload{Instance: v}, nil
}

// loadInstance reads an instance through the request's loader; in a
// subscription, past its cache (the loaders live as long as the
// subscription, and each event shows the instance as it is then).
func loadInstance(ctx context.Context, eventID, id string) (*graphread.View, error) {
	l := loaders.From(ctx)
	if oc := graphql.GetOperationContext(ctx); oc != nil && oc.Operation != nil && oc.Operation.Operation == ast.Subscription {
		return l.LoadInstanceFresh(ctx, id)
	}
	l.PrefetchEventInstances(ctx, eventID)
	return l.Instances.Instance.Load(ctx, id)()
}
