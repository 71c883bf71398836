package server

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/gqldoc"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/rest"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/resolvers"
)

func (s *Server) graphqlHandler() http.Handler {
	es := graph.NewExecutableSchema(graph.Config{Schema: gqldoc.Describe(graph.NewExecutableSchema(graph.Config{}).Schema(), s.Registry),
		Resolvers: &resolvers.Resolver{Registry: s.Registry, DB: s.DB, Live: s.Live}})
	srv := handler.New(es)
	srv.AddTransport(s.websocket())
	srv.AddTransport(sseTransport{s: s})
	srv.AddTransport(httpTransport{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.SetParserTokenLimit(MaxTokens)
	srv.SetValidationRulesFn(validationRules)
	for _, x := range []graphql.HandlerExtension{&admit{s: s}, newBounds(), extension.Introspection{}, &scalarVars{}, &cost{}, &charge{s: s}, &opMetrics{hist: s.gqlHist}} {
		// A field interceptor among them, or added later, turns the
		// executor's direct leaves off for every operation it sees
		// (graph.directLeaves decides per operation).
		srv.Use(x)
	}
	srv.SetErrorPresenter(s.presentError)
	srv.SetRecoverFunc(func(ctx context.Context, v any) error {
		s.Log.ErrorContext(ctx, "panic in resolver", "panic", v, "requestId", reqctx.RequestID(ctx), "operation", operationName(ctx), "field", fieldPath(ctx))
		return errs.E(errs.Internal, "internal error")
	})
	srv.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		if oc := graphql.GetOperationContext(ctx); oc.Operation != nil && oc.Operation.Operation == ast.Subscription {
			// A socket's subscriptions share its request's statement gate:
			// each with its own, 64 replays on one socket held 18
			// connections at once (a probe's).
			return next(loaders.With(ctx, s.DB))
		}
		// A query or a mutation has a statement gate of its own (a socket's
		// operations do not wait for each other's).
		ctx = loaders.With(store.WithStatementGate(ctx), s.DB)
		// A query or a mutation reads at most store.ReadBudget of large
		// values (a subscription's events each read their own resource).
		return s.inSlot(next(reqctx.WithReadBudget(ctx, store.ReadBudget)))
	})
	return allowMethods(srv)
}

// inSlot runs a query's or mutation's response handler h in an execution
// slot. The operation executes when its handler is first called: it waits
// for a slot first (Config.GraphQLConcurrency). The transports that stream
// (SSE, WebSocket) call it again until it answers nil, the end: those calls
// take no slot and answer what gqlgen does (an answer of its own there
// repeated without end).
func (s *Server) inSlot(h graphql.ResponseHandler) graphql.ResponseHandler {
	var ran atomic.Bool
	return func(ctx context.Context) *graphql.Response {
		if ran.Swap(true) {
			return h(ctx)
		}
		key := reqctx.ShareKey(ctx, reqctx.PrincipalFrom(ctx))
		if !s.execSlots.Acquire(ctx, key) {
			return &graphql.Response{Errors: gqlerror.List{s.presentError(ctx,
				errs.E(errs.Unavailable, "the server is busy: the operation did not start before its deadline; retry").With("reason", "busy"))}}
		}
		defer s.execSlots.Release(key)
		if resp := h(ctx); resp != nil {
			return resp
		}
		// gqlgen answers nothing at first once ctx has ended (the slot
		// came as the deadline passed): the HTTP transport wrote a nil
		// response, a panic answered INTERNAL. The deadline's answer.
		err := ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded
		}
		return &graphql.Response{Errors: gqlerror.List{s.presentError(ctx, store.ClassifyIn(ctx, err))}}
	}
}

// cannotUse is gqlparser's refusal of a variable's value for a built-in
// scalar; scalarWants says what the scalar takes.
var (
	notValidEnum  = regexp.MustCompile(`(?s)^(.*) is not a valid ([A-Za-z_][A-Za-z0-9_]*)$`)
	variableWords = map[string]string{
		"unknown field":                 "is not a field of its input type",
		"enums must be ints or strings": "must be one of the enum's values, a string",
	}
	cannotUse   = regexp.MustCompile(`^cannot use (?:value \S+|\w+) as (Int|Float|String|Boolean|ID)$`)
	scalarWants = map[string]string{
		"Int":     fmt.Sprintf("must be an integer from %d to %d", math.MinInt32, math.MaxInt32),
		"Float":   "must be a number",
		"String":  "must be a string",
		"Boolean": "must be true or false",
		"ID":      "must be a string or an integer",
	}
)

// parsedSchema is the schema's types, for the names of an enum's values.
var parsedSchema = graph.NewExecutableSchema(graph.Config{}).Schema()

// variableEnum is the enum type a variable's path (variable.in.state)
// names in the operation of ctx, nil when it names another type.
func variableEnum(ctx context.Context, path string) *ast.Definition {
	if !graphql.HasOperationContext(ctx) {
		return nil
	}
	op := graphql.GetOperationContext(ctx).Operation
	parts := strings.Split(strings.TrimPrefix(path, "variable."), ".")
	if op == nil || len(parts) == 0 {
		return nil
	}
	d := op.VariableDefinitions.ForName(strings.SplitN(parts[0], "[", 2)[0])
	if d == nil || d.Type == nil {
		return nil
	}
	t := d.Type
	for _, part := range parts[1:] {
		def := parsedSchema.Types[t.Name()]
		if def == nil || def.Kind != ast.InputObject {
			return nil
		}
		f := def.Fields.ForName(strings.SplitN(part, "[", 2)[0])
		if f == nil || f.Type == nil {
			return nil
		}
		t = f.Type
	}
	if def := parsedSchema.Types[t.Name()]; def != nil && def.Kind == ast.Enum {
		return def
	}
	return nil
}

func enumNames(def *ast.Definition) string {
	names := make([]string, len(def.EnumValues))
	for i, v := range def.EnumValues {
		names[i] = v.Name
	}
	return strings.Join(names, ", ")
}

// presentError is the one translation of errors into GraphQL errors:
// extensions.code is a contract code and extensions.details its details.
// Request errors (parse, validation, variables, the bounds) are
// INVALID_INPUT in words a client understands; resolver errors pass through
// errs.Public, so nothing internal reaches the client, and internal errors
// are logged with the request id that details.requestId gives the client.
func (s *Server) presentError(ctx context.Context, err error) *gqlerror.Error {
	ge := graphql.DefaultErrorPresenter(ctx, err)
	out := &gqlerror.Error{Message: ge.Message, Path: cutPath(ge.Path), Locations: ge.Locations}
	if ge.Err == nil {
		// A request error: gqlgen's parser and validator, or a refusal of ours
		// that already carries a contract code.
		if code, _ := ge.Extensions["code"].(string); errs.Known(errs.Code(code)) {
			out.Message = errs.CutText(out.Message)
			out.Extensions = ge.Extensions
			return out
		}
		details := map[string]any{"reason": "validation"}
		if code, _ := ge.Extensions["code"].(string); code == "GRAPHQL_PARSE_FAILED" {
			details["reason"] = "parse"
		}
		if p := pathString(ge.Path); p != "" {
			details["path"] = p
		} else if details["reason"] == "validation" && len(ge.Locations) == 1 && graphql.HasOperationContext(ctx) {
			// What the validator refused, which it names only by its
			// place in the document.
			if p := validationPath(ctx, graphql.GetOperationContext(ctx).RawQuery, ge.Message, ge.Locations[0].Line, ge.Locations[0].Column); p != "" {
				details["path"] = p
			}
		}
		out.Message = plainWords(ge.Message)
		if strings.HasPrefix(ge.Message, "operation ") && strings.HasSuffix(ge.Message, " not found") {
			// gqlgen's "operation <operationName> not found": it copied the
			// client's operationName (up to the body's 1 MiB) into the
			// answer, and for a document of several operations without one
			// read "operation  not found".
			details["path"] = "operationName"
			out.Message = "operationName names no operation of the document"
			if ge.Message == "operation  not found" {
				out.Message = "the document has more than one operation: operationName must name the one to run"
			}
		}
		if p, _ := details["path"].(string); p != "" && strings.HasPrefix(p, "variable.") {
			// gqlparser's words for a variable of a built-in scalar that
			// is not one ("cannot use value 0 as Int" for 1.5; "cannot use
			// bool as Int"; inside an input object, where it reads the
			// decoder's json.Number as a string, "cannot use string as
			// Int"), in the scalar check's words, naming the variable.
			if enum := variableEnum(ctx, p); enum != nil {
				// An enum's value, however it was wrong (a number was
				// quoted as a string, a list was "enums must be ints or
				// strings"): one wording, the values it takes.
				out.Message = p + " must be one of " + enumNames(enum)
			} else if m := cannotUse.FindStringSubmatch(ge.Message); m != nil {
				out.Message = p + " " + scalarWants[m[1]]
			} else if w, ok := variableWords[ge.Message]; ok {
				// gqlparser's other words for a variable's value name no
				// variable ("unknown field"; "enums must be ints or
				// strings" for a list given to an enum): named, as
				// these are ("variable.n must be ...").
				out.Message = p + " " + w
			} else if strings.HasPrefix(ge.Message, "must ") || strings.HasPrefix(ge.Message, "cannot ") {
				out.Message = p + " " + plainWords(ge.Message) // "must be defined", "cannot be null"
			}
		}
		// The parser's and validator's words quote the document's
		// literals and a variable's value whole (an Int literal of
		// 100,000 digits, an enum variable's value): cut as every
		// answer's are.
		if m := notValidEnum.FindStringSubmatch(out.Message); m != nil {
			// gqlgen's enum unmarshalling: the value first, unquoted
			// (512 characters of a variable's words came back).
			out.Message = strconv.Quote(errs.Cut(m[1])) + " is not a valid " + m[2]
			if p, _ := details["path"].(string); strings.HasPrefix(p, "variable.") {
				out.Message = p + ": " + out.Message
			}
		}
		p, _ := details["path"].(string)
		out.Message = errs.CutMessage(out.Message, p) // at most errs.MaxMessage: an input object literal came back whole
		if p != "" {
			details["path"] = errs.CutPath(p)
		}
		// A request error has no place in the response, and the GraphQL
		// spec's path is one: gqlgen put a variable's ["variable", "v"]
		// there for some refusals of its value and not for others (the
		// scalar checks'). details.path says where, for all of them.
		out.Path = nil
		out.Extensions = map[string]any{"code": string(errs.InvalidInput), "details": details}
		return out
	}
	e := s.public(ctx, ge.Err, pathString(ge.Path))
	within, _ := e.Details[errs.Within].(string)
	if _, ok := e.Details[errs.Within]; ok {
		d := maps.Clone(e.Details)
		delete(d, errs.Within)
		e = &errs.Error{Code: e.Code, Message: e.Message, Details: d}
	}
	if e.Code == errs.InvalidInput && e.Details["path"] == nil {
		path := ge.Path
		if arg, field, ok := argumentPath(ctx, ge.Path); ok {
			// A scalar's refusal of a literal argument (a Time that is
			// not one): named as the method names it (since, endsAt), as
			// every other argument's refusal is; the error's path is the
			// field's, a place in the response.
			path, out.Path = arg, cutPath(field)
		}
		if p := errs.JoinPath(pathString(path), within); p != "" {
			e = e.With("path", p)
			if strings.HasPrefix(e.Message, "must ") || strings.HasPrefix(e.Message, "has ") {
				e.Message = p + " " + e.Message // a scalar's refusal: name the field
			}
		}
	}
	path, _ := e.Details["path"].(string)
	out.Message = errs.CutMessage(e.Message, path)
	out.Extensions = map[string]any{"code": string(e.Code), "details": e.Details}
	return out
}

// argumentPath splits an error's path p inside an argument of the field
// resolving in ctx (gqlgen's path of an argument's value: the field's
// path, then the argument and the names inside it) into the argument's part
// as the method names it (a mutation's input fields without "input") and
// the field's path.
func argumentPath(ctx context.Context, p ast.Path) (arg, field ast.Path, ok bool) {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil {
		return nil, nil, false
	}
	field = fc.Path()
	if len(p) <= len(field) || pathString(p[:len(field)]) != pathString(field) {
		return nil, nil, false
	}
	arg = p[len(field):]
	if n, ok := arg[0].(ast.PathName); ok && n == "input" && len(arg) > 1 && fc.Object == "Mutation" {
		arg = arg[1:]
	}
	return arg, field, true
}

// public is errs.Public for the graph, logging internal errors with the
// request id, the operation and the field that failed (the line a
// client's details.requestId names).
func (s *Server) public(ctx context.Context, err error, field string) *errs.Error {
	return rest.PublicError(ctx, s.Log, err, "operation", operationName(ctx), "field", field)
}

// operationName names the operation for log lines: its name, or its kind
// for an anonymous one.
func operationName(ctx context.Context) string {
	if !graphql.HasOperationContext(ctx) {
		return ""
	}
	oc := graphql.GetOperationContext(ctx)
	switch {
	case oc.Operation != nil && oc.Operation.Name != "":
		return oc.Operation.Name
	case oc.Operation != nil:
		return "anonymous " + string(oc.Operation.Operation)
	}
	return oc.OperationName
}

// fieldPath is the path of the field resolving in ctx, if any.
func fieldPath(ctx context.Context) string {
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		return pathString(fc.Path())
	}
	return ""
}

// pathString renders a GraphQL path as details.path does on the method
// surface: createProject.input.name, edges[2].node.
func pathString(p ast.Path) string {
	var b strings.Builder
	for _, el := range p {
		switch el := el.(type) {
		case ast.PathIndex:
			fmt.Fprintf(&b, "[%d]", int(el))
		case ast.PathName:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(errs.Cut(string(el)))
		}
	}
	return b.String()
}

// cutPath is an error's path with the names a client made up (a key of
// a variable's object) cut as errs.Cut cuts them.
func cutPath(p ast.Path) ast.Path {
	for i, el := range p {
		if n, ok := el.(ast.PathName); ok && len(n) > errs.Quoted {
			out := append(ast.Path(nil), p...)
			for j := i; j < len(out); j++ {
				if n, ok := out[j].(ast.PathName); ok {
					out[j] = ast.PathName(errs.Cut(string(n)))
				}
			}
			return out
		}
	}
	return p
}

// goWords are the Go kind names in gqlparser's variable coercion messages,
// with the JSON words a client knows.
var goWords = strings.NewReplacer(
	"cannot use float64 as", "cannot use a number as", "cannot use int64 as", "cannot use a number as",
	"cannot use int as", "cannot use a number as", "cannot use bool as", "cannot use a boolean as",
	"cannot use map as", "cannot use an object as", "cannot use slice as", "cannot use an array as",
	"cannot use string as", "cannot use a string as",
	"not a map", "not an object", "not a slice", "not an array", "not a float64", "not a number",
	"not a bool", "not a boolean",
)

// plainWords is a parser's or validator's message in a client's words
// (the presenter then cuts what it quotes of the document: errs.CutText).
func plainWords(msg string) string { return goWords.Replace(msg) }

// opMetrics counts and times operations by name and type. Names are the
// client's choice, so at most maxOpNames distinct ones get their own label.
type opMetrics struct {
	hist  *prometheus.HistogramVec
	mu    sync.Mutex
	names map[string]bool
}

const maxOpNames = 200

var opName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

func (m *opMetrics) label(name string) string {
	if name == "" {
		return "anonymous"
	}
	if !opName.MatchString(name) {
		return "other"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.names == nil {
		m.names = map[string]bool{}
	}
	if !m.names[name] && len(m.names) >= maxOpNames {
		return "other"
	}
	m.names[name] = true
	return name
}

func (*opMetrics) ExtensionName() string                   { return "OperationMetrics" }
func (*opMetrics) Validate(graphql.ExecutableSchema) error { return nil }
func (m *opMetrics) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	start := time.Now()
	resp := next(ctx)
	if graphql.HasOperationContext(ctx) {
		oc := graphql.GetOperationContext(ctx)
		name, typ := oc.OperationName, "unknown"
		if oc.Operation != nil {
			typ = string(oc.Operation.Operation)
			if name == "" {
				name = oc.Operation.Name
			}
		}
		m.hist.WithLabelValues(typ, m.label(name)).Observe(time.Since(start).Seconds())
	}
	return resp
}

// WaitingOperations is how many GraphQL queries and mutations wait for an
// execution slot on this replica now.
func (s *Server) WaitingOperations() int { return s.execSlots.Waiting() }
