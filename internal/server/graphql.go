package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/resolvers"
)

// Limits of the graph.
const (
	MaxDepth = 12
	// MaxComplexity admits the fleet dashboard query (50 pools of 40
	// nodes with their latest inventory, about 25000) with headroom; a
	// connection costs its page size times its children.
	MaxComplexity = 50000
)

func pageCost(child int, first *int) int {
	n := 50
	if first != nil && *first > 0 {
		n = *first
	}
	return 1 + child*n
}

func (s *Server) graphqlHandler() http.Handler {
	cfg := graph.Config{Resolvers: &resolvers.Resolver{Registry: s.Registry, DB: s.DB}}
	c := &cfg.Complexity
	c.Tenant.Projects = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Tenant.Tokens = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Tenant.Members = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Viewer.Tenants = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Project.Members = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Tenant.Pools = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Pool.Nodes = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Pool.JoinRequests = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.ComputeNode.InventoryHistory = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.ComputeNode.Workflows = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Profile.Versions = func(child int, first *int, _ *string) int { return pageCost(child, first) }

	srv := handler.New(graph.NewExecutableSchema(cfg))
	srv.AddTransport(transport.Websocket{
		Implementation: transport.CoderWebsocketImplementation{AcceptOptions: websocket.AcceptOptions{
			OriginPatterns: s.Config.AllowedOrigins,
		}},
		KeepAlivePingInterval: 15 * time.Second,
		PingPongInterval:      15 * time.Second,
		InitTimeout:           10 * time.Second,
		InitFunc:              s.wsInit,
	})
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.Use(extension.Introspection{})
	srv.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	srv.Use(depthLimit{max: MaxDepth})
	srv.Use(extension.FixedComplexityLimit(MaxComplexity))
	srv.Use(&opMetrics{hist: s.gqlHist})
	srv.SetErrorPresenter(s.presentError)
	srv.SetRecoverFunc(func(ctx context.Context, v any) error {
		s.Log.ErrorContext(ctx, "panic in resolver", "panic", v)
		return errs.E(errs.Internal, "internal error")
	})
	srv.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		return next(loaders.With(ctx, loaders.New(s.DB)))
	})
	return overHTTP(srv)
}

// presentError maps domain errors into extensions.code and .details; other
// errors become INTERNAL (or UNAVAILABLE) without internals.
func (s *Server) presentError(ctx context.Context, err error) *gqlerror.Error {
	gerr := graphql.DefaultErrorPresenter(ctx, err)
	var src error = err
	var ge *gqlerror.Error
	if errors.As(err, &ge) && ge.Err != nil {
		src = ge.Err
	} else if errors.As(err, &ge) {
		return gerr // a parse or validation error: gqlgen's own message
	}
	var e *errs.Error
	switch {
	case store.Unreachable(src):
		e = errs.E(errs.Unavailable, "the database is unavailable; retry")
	default:
		e = errs.Public(src, reqctx.RequestID(ctx))
		if e.Code == errs.Internal {
			s.Log.ErrorContext(ctx, "internal error", "err", src)
		}
	}
	gerr.Message = e.Message
	gerr.Extensions = map[string]any{"code": string(e.Code), "details": e.Details}
	return gerr
}

// wsInit authenticates a WebSocket from connection_init's payload.
func (s *Server) wsInit(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	h := p.Authorization()
	if h == "" {
		if v, ok := p["authorization"].(string); ok {
			h = v
		}
	}
	// 4403 Forbidden is graphql-transport-ws's close code for a refused init.
	refuse := func(reason string) (context.Context, *transport.InitPayload, error) {
		c := transport.WithWebsocketCloseCode(transport.AppendCloseReason(ctx, "UNAUTHENTICATED: "+reason), 4403)
		return c, nil, errors.New("UNAUTHENTICATED: " + reason)
	}
	tok, ok := auth.FromHeader(h)
	if !ok {
		return refuse("connection_init needs {\"Authorization\": \"Bearer <token>\"}")
	}
	pr, err := auth.Authenticate(ctx, s.DB, tok)
	if err != nil {
		return refuse("unknown or revoked bearer token")
	}
	return reqctx.WithPrincipal(ctx, pr), nil, nil
}

// depthLimit refuses operations nested deeper than max before they run.
type depthLimit struct{ max int }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = depthLimit{}

func (depthLimit) ExtensionName() string                   { return "DepthLimit" }
func (depthLimit) Validate(graphql.ExecutableSchema) error { return nil }
func (d depthLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	if depth := selectionDepth(oc.Operation.SelectionSet, 0, map[string]bool{}); depth > d.max {
		e := gqlerror.Errorf("operation is nested %d levels deep, more than the limit of %d", depth, d.max)
		e.Extensions = map[string]any{"code": "INVALID_INPUT", "details": map[string]any{"depth": depth, "limit": d.max}}
		return e
	}
	return nil
}

func selectionDepth(set ast.SelectionSet, depth int, seen map[string]bool) int {
	max := depth
	for _, sel := range set {
		var d int
		switch s := sel.(type) {
		case *ast.Field:
			if len(s.SelectionSet) == 0 {
				d = depth + 1
			} else {
				d = selectionDepth(s.SelectionSet, depth+1, seen)
			}
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, depth, seen)
		case *ast.FragmentSpread:
			if s.Definition == nil || seen[s.Name] {
				continue
			}
			seen[s.Name] = true
			d = selectionDepth(s.Definition.SelectionSet, depth, seen)
			delete(seen, s.Name)
		}
		if d > max {
			max = d
		}
	}
	return max
}

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

// overHTTP closes two gaps between gqlgen and the GraphQL-over-HTTP spec:
// under application/json a request that parses as JSON but fails GraphQL
// parsing or validation is answered 200 (gqlgen says 422), and under
// application/graphql-response+json such a 400 carries no "data" entry.
func overHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			next.ServeHTTP(w, r)
			return
		}
		sw := &specWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		sw.finish()
	})
}

type specWriter struct {
	http.ResponseWriter
	status int
	buf    []byte
	hold   bool
}

func (s *specWriter) WriteHeader(code int) {
	ct := s.Header().Get("Content-Type")
	switch {
	case code == http.StatusUnprocessableEntity && strings.HasPrefix(ct, "application/json"):
		code = http.StatusOK
	case code == http.StatusBadRequest && strings.HasPrefix(ct, "application/graphql-response+json"):
		s.status, s.hold = code, true
		return
	}
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *specWriter) Write(b []byte) (int, error) {
	if s.hold {
		s.buf = append(s.buf, b...)
		return len(b), nil
	}
	return s.ResponseWriter.Write(b)
}

func (s *specWriter) finish() {
	if !s.hold {
		return
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(s.buf, &body); err == nil {
		delete(body, "data")
		if b, err := json.Marshal(body); err == nil {
			s.buf = b
		}
	}
	s.Header().Del("Content-Length")
	s.ResponseWriter.WriteHeader(s.status)
	_, _ = s.ResponseWriter.Write(s.buf)
}
