// Package resolvers holds the GraphQL resolvers. They translate: mutations
// call the method registry (the same validation, decision and audit as the
// method surface), fields read through the request's dataloaders, which
// decide (internal/loaders): resolvers name no permission and hold no
// visibility rule, and pass every loader error on as the field's error.
package resolvers

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/live"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/store"
)

// Resolver is the root resolver.
type Resolver struct {
	Registry *registry.Registry
	DB       *store.DB
	Live     *live.Hub
}

// call runs a registry method with its typed input: the method surface's
// validation, decision, transaction and audit. The method's handler is
// named in its registration (see the registry package's doc).
func call[Out, In any](ctx context.Context, r *Resolver, key string, in *In) (*Out, error) {
	return registry.Call[In, Out](ctx, r.Registry, key, in)
}

// jsonArg is a JSON scalar argument as the bytes a method's free-form
// field takes (nil when the argument is absent or null); the registry
// checks them as it checks a body's.
func jsonArg(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}

// objectArg is a JSON scalar argument a method takes as an object: a
// value that is not one is refused as the method surface refuses it.
func objectArg(name string, v any) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errs.Invalid(name, "%s must be an object", name)
	}
	return m, nil
}

// The cursors of the graph's own connections (the others' are their
// methods'): a profile's versions, whose key is a version.
var versionCursors = checkedKey{page.Kind("profileVersion"), func(k string) bool { _, ok := profiles.VersionKey(k); return ok }}

// checkedKey is a Kind whose cursors hold one string key that valid must
// accept: one it refuses is not a cursor this server returned.
type checkedKey struct {
	page.Kind
	valid func(string) bool
}

// Decode is Kind.Decode, then the key's own check.
func (c checkedKey) Decode(cursor string, dst ...any) (bool, error) {
	got, err := c.Kind.Decode(cursor, dst...)
	if k, ok := dst[0].(*string); err == nil && got && ok && !c.valid(*k) {
		return false, errs.Invalid("cursor", "cursor is not one this server returned")
	}
	return got, err
}

// The cursors of the connections whose method's cursor is the last item's
// id (a seed's rule): the connection's cursors are the same ids.
var (
	eventCursors    = page.VerbatimOf(events.IDPattern)
	snapshotCursors = page.VerbatimOf(ids.Pattern(ids.Inventory))
)

// pageArgs checks first/after the way the method surface checks
// limit/cursor; after must be a cursor of kind.
func pageArgs(kind page.Codec, first *int, after *string) (int, string, error) {
	n := page.DefaultLimit
	if first != nil {
		n = *first
	}
	if n < 1 || n > page.MaxLimit {
		return 0, "", errs.Invalid("first", "first must be in 1-%d", page.MaxLimit)
	}
	var key string
	if after != nil && *after != "" {
		if err := checkAfter(*after, func(c string) error { _, err := kind.Decode(c, &key); return err }); err != nil {
			return 0, "", err
		}
	}
	return n, key, nil
}

// statedFirst is first, or when it is null the field's stated default
// (relay.DefaultFirst).
func statedFirst(ctx context.Context, first *int) *int {
	if first != nil {
		return first
	}
	fc := graphql.GetFieldContext(ctx)
	if fc == nil {
		return nil
	}
	n := relay.DefaultFirst(fc.Field.Definition)
	return &n
}

// checkAfter checks a connection's after as its method checks its cursor
// (decode: the list's own decoder), in the method's words with after for
// cursor.
func checkAfter(after string, decode func(string) error) error {
	if err := page.CheckCursorLength("after", after); err != nil {
		return err
	}
	if err := decode(after); err != nil {
		e, _ := errs.As(err)
		return errs.Invalid("after", "after%s", strings.TrimPrefix(e.Message, "cursor"))
	}
	return nil
}

// connection turns a loaded page into edges, page info and the total.
// An edge's cursor is encoded only when the query selects edges { cursor }
// (ctx is the connection field's); pageInfo's start and end cursors always
// are.
func connection[T any, E any](ctx context.Context, kind page.Codec, c *page.Conn[T], key func(*T) string, edge func(cursor string, node *T) E) ([]E, *model.PageInfo, int) {
	edges := make([]E, 0, len(c.Items))
	info := &model.PageInfo{HasNextPage: c.HasNext}
	if n := len(c.Items); n > 0 {
		start, end := kind.Encode(key(&c.Items[0])), ""
		if n > 1 {
			end = kind.Encode(key(&c.Items[n-1]))
		} else {
			end = start
		}
		info.StartCursor, info.EndCursor = &start, &end
	}
	cursors := edgeCursorsSelected(ctx)
	for i := range c.Items {
		var cur string
		if cursors {
			cur = kind.Encode(key(&c.Items[i]))
		}
		edges = append(edges, edge(cur, &c.Items[i]))
	}
	return edges, info, c.Total
}

// edgeCursorsSelected says whether the field of ctx (a connection) may
// select edges { cursor }: through any fragment, whatever its type
// condition or directives, so that it errs towards encoding. Without a
// field context it says yes.
func edgeCursorsSelected(ctx context.Context) bool {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil {
		return true
	}
	return selects(fc.Field.Selections, "edges", func(edges *ast.Field) bool {
		return selects(edges.SelectionSet, "cursor", nil)
	})
}

// asksFor says whether the field resolving in ctx selects a child named
// name that will run: fragments spread, @skip and @include decided with the
// operation's variables (a totalCount under @skip(if: true) was counted,
// which the cost rule, deciding them, did not charge); true outside a
// field.
func asksFor(ctx context.Context, name string) bool {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || fc.Field.Field == nil || !graphql.HasOperationContext(ctx) {
		return true
	}
	for _, f := range graphql.CollectFields(graphql.GetOperationContext(ctx), fc.Field.Selections, nil) {
		if f.Name == name {
			return true
		}
	}
	return false
}

// selects says whether set has a field named name (for which then holds,
// when given), looking into fragments.
func selects(set ast.SelectionSet, name string, then func(*ast.Field) bool) bool {
	for _, s := range set {
		switch s := s.(type) {
		case *ast.Field:
			if s.Name == name && (then == nil || then(s)) {
				return true
			}
		case *ast.InlineFragment:
			if selects(s.SelectionSet, name, then) {
				return true
			}
		case *ast.FragmentSpread:
			if s.Definition == nil || selects(s.Definition.SelectionSet, name, then) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// loadConn reads one parent's page through a page loader and shapes it as
// edges, page info and total: what every batched connection field does.
func loadConn[T any, E any](ctx context.Context, kind page.Codec, l *loaders.L[loaders.PageKey, *page.Conn[T]], parent string,
	first *int, after *string, key func(*T) string, edge func(cursor string, node *T) E) ([]E, *model.PageInfo, int, error) {
	return loadConnIn(ctx, kind, l, parent, "", first, after, key, edge)
}

// loadConnIn is loadConn for a parent reached through tenant view (a
// pool's View): the page holds what the caller reads of that tenant.
func loadConnIn[T any, E any](ctx context.Context, kind page.Codec, l *loaders.L[loaders.PageKey, *page.Conn[T]], parent, view string,
	first *int, after *string, key func(*T) string, edge func(cursor string, node *T) E) ([]E, *model.PageInfo, int, error) {
	n, k, err := pageArgs(kind, statedFirst(ctx, first), after)
	if err != nil {
		return nil, nil, 0, err
	}
	// Ask for this page of every sibling at once: a level is one batch.
	loaders.PrefetchPages(ctx, loaders.From(ctx), l, parent, view, n, k)
	c, err := l.Load(ctx, loaders.PageKey{Parent: parent, First: n, After: k, View: view})()
	if err != nil {
		return nil, nil, 0, err
	}
	edges, info, total := connection(ctx, kind, c, key, edge)
	return edges, info, total, nil
}

// rawJSON is stored JSON for a JSON scalar field, written out as stored:
// decoded into Go values, a number past float64's range (1e400) failed the
// field with INTERNAL, and an integer past 2^53 was rounded, where the
// method surface answers both as they are.
func rawJSON(b []byte) (any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if !json.Valid(b) {
		return nil, errors.New("resolvers: stored JSON is not valid")
	}
	return json.RawMessage(b), nil
}

// largeJSON is rawJSON for a large stored document (a pool's policy, a
// profile's or a workflow's document): each time the answer holds it, it is
// spent from the request's read budget. The loaders spend what they read,
// once per distinct page; aliases of one page answered it again for
// nothing (a probe's 100 aliases of 40 pools' policies answered 269 MB).
func largeJSON(ctx context.Context, b []byte) (any, error) {
	if err := store.Spend(ctx, len(b)); err != nil {
		return nil, err
	}
	return rawJSON(b)
}

// plain turns a Go value into its JSON form for a JSON scalar field.
func plain(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return rawJSON(b)
}

// nodeOf returns a loaded object as a Node: nil (no error) when the
// loader found nothing the caller may read, the error when it failed.
func nodeOf[V any](v *V, err error) (relay.Node, error) {
	if err != nil || v == nil {
		return nil, err
	}
	return v, nil
}

func nodePayload(n *nodes.Node, err error) (*model.NodePayload, error) {
	if err != nil {
		return nil, err
	}
	return &model.NodePayload{Node: n}, nil
}
