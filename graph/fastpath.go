package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/executor"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/store"
)

// unpatched turns internal/gqlfast's rewrites off one by one, each back to
// the gqlgen code it replaced, so that a test can compare the executor's
// answers and allocations with gqlgen's own (gqlfast_test.go). Only tests
// set it, before any operation runs.
var unpatched struct{ leaves, deferred, objects, lists, elements, buffers bool }

// directLeaves says whether the executor may marshal leaf fields read
// straight from the bound struct without gqlgen's per-field machinery
// (field context, field middleware, panic guard): see internal/gqlfast,
// which writes the calls. Such fields cannot fail or panic, but a field
// interceptor would not see them: so the fast path is taken only when the
// operation's field middleware is gqlgen's own identity, the one an
// executor builds without any graphql.FieldInterceptor (AroundFields, Use
// of an extension that intercepts fields, or an OperationContextMutator
// that replaces the middleware). Decided per operation from the
// operation's context, so no way of adding an interceptor can skip it.
func directLeaves(oc *graphql.OperationContext) bool {
	return !unpatched.leaves && reflect.ValueOf(oc.ResolverMiddleware).Pointer() == noFieldMiddleware
}

// noFieldMiddleware is the code of the field middleware gqlgen's executor
// gives an operation when it has no field interceptor (a closure in
// executor.processExtensions that calls next). A closure wrapping an
// interceptor has other code, so comparing code pointers tells them apart;
// if gqlgen ever made the identity differ per executor, the comparison
// would fail safe (no fast path) and TestDirectLeavesWithoutInterceptors
// would say so.
var noFieldMiddleware = func() uintptr {
	oc, _ := executor.New(NewExecutableSchema(Config{})).CreateOperationContext(graphql.StartOperationTrace(context.Background()), &graphql.RawParams{})
	if oc == nil || oc.ResolverMiddleware == nil {
		return 0
	}
	return reflect.ValueOf(oc.ResolverMiddleware).Pointer()
}()

// newDeferredGroup is graphql.NewDeferredGroup for an object with a
// deferred field (@defer), and an empty group otherwise: gqlgen's own
// builds the object's path, a field set and a map for every object of
// every query. ResolveConcurrently touches the group only for deferred
// fields, and an empty group is never processed.
func newDeferredGroup(ctx context.Context, fields []graphql.CollectedField) graphql.DeferredGroup {
	if unpatched.deferred {
		return graphql.NewDeferredGroup(ctx)
	}
	for i := range fields {
		if fields[i].IsDeferred() {
			return graphql.NewDeferredGroup(ctx)
		}
	}
	return graphql.DeferredGroup{}
}

// marshalSliceInline is graphql.MarshalSliceConcurrently without a goroutine
// per element, for lists whose elements resolve nothing (every field, at
// every depth, is read from the bound value; internal/gqlfast decides):
// starting a goroutine per GPU of a fleet query cost more than marshalling
// the GPU. Each element still gets its index in the path and its own panic
// guard, as there.
func marshalSliceInline(ctx context.Context, length int, marshalElement func(ctx context.Context, i int) graphql.Marshaler) graphql.Array {
	if unpatched.lists {
		return graphql.MarshalSliceConcurrently(ctx, length, 0, false, marshalElement)
	}
	ret := make(graphql.Array, length)
	// One field context for the list, its index moved along: the elements
	// are marshalled one after the other and start nothing that outlives
	// their turn (no resolver runs under them), and an error's path is
	// taken when it is added, so each still names its own index.
	idx := 0
	fc := &graphql.FieldContext{Index: &idx}
	childCtx := graphql.WithFieldContext(ctx, fc)
	for i := range ret {
		idx, fc.Result = i, nil
		ret[i] = marshalElementInline(childCtx, i, marshalElement)
	}
	return ret
}

// marshalSliceAuto marshals a list of typ, an object with fields that load,
// inline when the selection sel reaches none of them (a tenant's pools
// asked for their names and sites), and with a goroutine per element
// otherwise, so that the elements' loads meet in one batch.
func marshalSliceAuto(ctx context.Context, typ string, sel ast.SelectionSet, length int, marshalElement func(ctx context.Context, i int) graphql.Marshaler) graphql.Array {
	if length > 1 && !unpatched.lists && !selectsResolved(typ, sel, 0) {
		return marshalSliceInline(ctx, length, marshalElement)
	}
	return graphql.MarshalSliceConcurrently(ctx, length, 0, false, marshalElement)
}

type fieldInfo struct {
	typ      string
	resolved bool
}

// selectsResolved says whether sel, on an object of type typ, may reach a
// field resolved concurrently, at any depth. It errs towards yes: fragments
// count whatever their type condition and directives, and an unknown type
// or field (an interface, a union) is a yes.
func selectsResolved(typ string, sel ast.SelectionSet, depth int) bool {
	fields, ok := objectFields[typ]
	if !ok || depth > 32 {
		return true
	}
	for _, s := range sel {
		switch s := s.(type) {
		case *ast.Field:
			if s.Name == "__typename" {
				continue
			}
			f, ok := fields[s.Name]
			if !ok || f.resolved {
				return true
			}
			if len(s.SelectionSet) > 0 && selectsResolved(f.typ, s.SelectionSet, depth+1) {
				return true
			}
		case *ast.InlineFragment:
			if selectsResolved(typ, s.SelectionSet, depth+1) {
				return true
			}
		case *ast.FragmentSpread:
			if s.Definition == nil || selectsResolved(typ, s.Definition.SelectionSet, depth+1) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

func marshalElementInline(ctx context.Context, i int, marshalElement func(ctx context.Context, i int) graphql.Marshaler) (res graphql.Marshaler) {
	defer func() {
		if r := recover(); r != nil {
			graphql.AddError(ctx, graphql.Recover(ctx, r))
			res = graphql.Null
		}
	}()
	return marshalElement(ctx, i)
}

// Response buffers are sized from the last answer to the same query text,
// so that a large answer (2.4 MB for a fleet query) is not built by
// doubling a buffer from 64 bytes: about twice its size in garbage, and a
// copy per doubling. At most maxSizeHints query texts are remembered.
var (
	sizeHints  sync.Map // query text -> int
	sizeHintsN atomic.Int64
)

const maxSizeHints = 1000

func responseSizeHint(query string) int {
	if unpatched.buffers {
		return 0
	}
	if v, ok := sizeHints.Load(query); ok {
		n := v.(int)
		return n + n/8 + 512
	}
	return 0
}

func rememberResponseSize(query string, n int) {
	if n < 4096 || unpatched.buffers {
		return // the buffer's own growth costs little
	}
	if _, loaded := sizeHints.Swap(query, n); !loaded && sizeHintsN.Add(1) > maxSizeHints {
		sizeHints.Clear()
		sizeHintsN.Store(0)
	}
}

// maxAnswer bounds what one query or mutation answers: the read budget
// (store.ReadBudget), which the loaders and the large fields spend, bounds
// what is read and what the large values answer; this bounds the answer
// itself, whatever fields and aliases make it up, before it is held whole.
// (A probe's aliases of a workflow's steps answered 720 MB: each step
// repeats its profile's userData, and the steps were spent once, when
// loaded; JSON's escapes of <, > and & answer six bytes for one stored.)
const maxAnswer = store.ReadBudget

// errAnswerTooLarge stops marshalBounded's writes.
var errAnswerTooLarge = errors.New("graph: the answer is over its bound")

// boundedWriter writes to buf until maxAnswer bytes, then stops the
// marshalling (a panic marshalBounded recovers): nothing more is written,
// escaped or held.
type boundedWriter struct {
	buf  *bytes.Buffer
	left int
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.left -= len(p); w.left < 0 {
		panic(errAnswerTooLarge)
	}
	return w.buf.Write(p)
}

func (w *boundedWriter) WriteString(s string) (int, error) {
	if w.left -= len(s); w.left < 0 {
		panic(errAnswerTooLarge)
	}
	return w.buf.WriteString(s)
}

// maxEventAnswer bounds one event of a subscription: an event and its
// resource are kilobytes, and a subscription's selection runs again for
// every event (its complexity, at most 2000, let it repeat a pool's 64 KiB
// policy a thousand times per event).
const maxEventAnswer = 4 << 20

// marshalBounded writes data's answer to buf, at most maxAnswer bytes; false
// when it was larger (buf then holds a part of it).
func marshalBounded(data graphql.Marshaler, buf *bytes.Buffer) bool {
	return marshalBoundedTo(data, buf, maxAnswer)
}

// marshalBoundedTo is marshalBounded to limit bytes.
func marshalBoundedTo(data graphql.Marshaler, buf *bytes.Buffer, limit int) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if r != errAnswerTooLarge { //nolint:errorlint // the sentinel itself
				panic(r)
			}
			buf.Reset()
			ok = false
		}
	}()
	data.MarshalGQL(&boundedWriter{buf: buf, left: limit})
	return true
}

// eventTooLarge is a subscription's event past maxEventAnswer: the event's
// error in its place.
func eventTooLarge(context.Context) *graphql.Response {
	return readBudgetRefusal(fmt.Sprintf("this event's answer is over %d MiB: select less of its resource", maxEventAnswer>>20), maxEventAnswer)
}

// answerTooLarge is the answer to an operation whose answer went past
// maxAnswer: its error alone, as the read budget's refusal says it.
func answerTooLarge(context.Context) *graphql.Response {
	return readBudgetRefusal(fmt.Sprintf("this operation answers more than %d MiB: ask for smaller pages (first), fewer of them, or fewer aliases of one", maxAnswer>>20), maxAnswer)
}

// readBudgetRefusal is a response of one INVALID_INPUT error with the read
// budget's reason and limit.
func readBudgetRefusal(msg string, limit int) *graphql.Response {
	return &graphql.Response{Errors: gqlerror.List{{
		Message:    msg,
		Extensions: map[string]any{"code": string(errs.InvalidInput), "details": map[string]any{"reason": "read-budget", "limit": limit}},
	}}}
}

// marshalObject is an object's answer, written as graphql.FieldSet's
// MarshalGQL writes it (each alias once, in order), without that method's
// heap copy of every field and map per object. Aliases are GraphQL names,
// so they are written without escaping. internal/gqlfast routes every
// object without deferred fields here.
func marshalObject(fields []graphql.CollectedField, out *graphql.FieldSet) graphql.Marshaler {
	if unpatched.objects {
		return out
	}
	return &objectJSON{fields: fields, values: out.Values}
}

type objectJSON struct {
	fields []graphql.CollectedField
	values []graphql.Marshaler
}

var (
	jsonOpen  = []byte{'{'}
	jsonClose = []byte{'}'}
	jsonComma = []byte{','}
	jsonQuote = []byte{'"'}
	jsonColon = []byte{'"', ':'}
)

func (o *objectJSON) MarshalGQL(w io.Writer) {
	_, _ = w.Write(jsonOpen)
	first := true
fields:
	for i := range o.fields {
		alias := o.fields[i].Alias
		for j := 0; j < i; j++ {
			if o.fields[j].Alias == alias {
				continue fields
			}
		}
		if !first {
			_, _ = w.Write(jsonComma)
		}
		first = false
		_, _ = w.Write(jsonQuote)
		_, _ = io.WriteString(w, alias)
		_, _ = w.Write(jsonColon)
		o.values[i].MarshalGQL(w)
	}
	_, _ = w.Write(jsonClose)
}
