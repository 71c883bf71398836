package server

import (
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/safe"
)

// GraphQL over Server-Sent Events (the graphql-sse protocol, distinct
// connections mode) at /graphql/stream: one operation per request, its
// results as `next` events and a final `complete`. Errors found before
// execution are `next` events too, as the protocol says (a 400 would make
// an EventSource fail without saying why). Authentication is the request's
// bearer token; the stream is a session like a WebSocket, so a revoked
// token ends it and a changed role is decided again.

// StreamPath is where the event streams are served.
const StreamPath = "/graphql/stream"

type sseTransport struct{ s *Server }

func (sseTransport) Supports(r *http.Request) bool {
	return r.URL.Path == StreamPath && r.Header.Get("Upgrade") == ""
}

func (t sseTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	var params *graphql.RawParams
	var perr *errs.Error
	if r.Method == http.MethodGet {
		params, perr = paramsFromQuery(r.URL.RawQuery)
	} else {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != mediaJSON {
			writeRequestError(w, mediaJSON, http.StatusUnsupportedMediaType,
				errs.E("UNSUPPORTED_MEDIA_TYPE", "send the request as %s", mediaJSON))
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeRequestError(w, mediaJSON, http.StatusBadRequest, errs.E(errs.InvalidInput, "could not read the body"))
			return
		}
		params, perr = DecodeParams(body)
	}
	// A request that is no GraphQL request gets its error before any
	// stream starts (a stream that began would end without complete).
	if perr != nil {
		writeRequestError(w, mediaJSON, http.StatusBadRequest, perr)
		return
	}
	t.s.conns.Add(1)
	defer t.s.conns.Done()
	// The request's deadline bounds a query or a mutation; a subscription
	// runs until it ends or its client leaves.
	deadline, bounded := r.Context().Deadline()
	ctx, cancel := context.WithCancel(withoutDeadline(r.Context()))
	defer cancel()
	p := reqctx.PrincipalFrom(ctx)
	tok, _ := auth.FromHeader(r.Header.Get("Authorization"))
	sess := &sseSession{s: t.s, secret: tok}
	sess.x = t.s.sessions.add(p, func(code websocket.StatusCode, reason string) {
		sess.mu.Lock()
		sess.closedWith = reason
		sess.mu.Unlock()
		cancel()
	})
	if sess.x == nil { // before any stream starts
		writeRequestError(w, mediaJSON, http.StatusTooManyRequests, t.s.sessions.errTooMany())
		return
	}
	defer t.s.sessions.remove(sess.x)
	// Long-lived: lift the server's write deadline.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The status and headers go out now: a client (or a proxy with a
	// response-header timeout) knows the stream is open before its first
	// event or keep-alive.
	_ = rc.Flush()
	st := &sseStream{w: w, rc: rc, timeout: t.s.Config.WS.WriteTimeout}
	params.Headers = r.Header

	ctx = reqctx.WithSession(ctx, sess)
	ctx, endErr := reqctx.WithEnd(ctx)

	oc, list := exec.CreateOperationContext(ctx, params)
	list = capErrors(list)
	if list != nil {
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, oc), list)
		st.next(resp)
		st.complete()
		return
	}
	if bounded && oc.Operation != nil && oc.Operation.Operation != ast.Subscription {
		var end context.CancelFunc
		ctx, end = context.WithDeadline(ctx, deadline)
		defer end()
	}
	responses, rctx := exec.DispatchOperation(ctx, oc)
	// The handler is the stream's only writer, and it writes nothing after
	// it returns: net/http recycles the response's buffers then, and a
	// write from a goroutine or a timer that outlived the handler crashed
	// the process. Results are executed on a goroutine that never touches
	// the response and that the handler waits for before it returns;
	// keep-alives come from the handler's own loop. A write that takes
	// longer than Config.WS.WriteTimeout (the client does not read) ends
	// the stream; the results goroutine then stops at its next send, so a
	// stuck client holds the subscription's small buffer and one rendered
	// result, never a queue.
	// A result is handed over as its JSON: the executor may reuse a
	// response's buffers for the next one.
	results := make(chan []byte)
	log := t.s.Log
	safe.Go(ctx, log, "event stream results", func() {
		defer close(results)
		safe.Do(ctx, log, "event stream execution", func() {
			for {
				resp := responses(rctx)
				if resp == nil {
					return
				}
				b, err := json.Marshal(resp)
				if err != nil {
					reqctx.SetEnd(ctx, err)
					return
				}
				select {
				case results <- b:
				case <-ctx.Done():
					return
				}
			}
		}, func() {
			reqctx.SetEnd(ctx, errs.E(errs.Internal, "internal error"))
		})
	})
	defer func() {
		cancel()
		for range results { // wait for the results goroutine to end
		}
	}()
	var tick <-chan time.Time
	if every := t.s.Config.WS.PingInterval; every > 0 {
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		tick = ticker.C
	}
loop:
	for {
		select {
		case b, ok := <-results:
			if !ok {
				break loop
			}
			if !st.event("next", b) {
				return // the client left or does not read
			}
		case <-tick:
			if !st.keepAlive() {
				return
			}
		}
	}
	// Why it ended, if not by the client: an error of the subscription, a
	// revoked token, the server shutting down.
	sess.mu.Lock()
	reason := sess.closedWith
	sess.mu.Unlock()
	switch {
	case reason != "" && strings.Contains(reason, "revoked"):
		st.errors(errs.E(errs.Unauthenticated, "the bearer token was revoked"))
	case reason != "":
		st.errors(errs.E(errs.Unavailable, "%s", reason).With("reason", "shutdown"))
	case endErr() != nil:
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, oc), gqlerror.List{gqlerror.WrapPath(nil, endErr())})
		st.next(resp)
	}
	st.complete()
}

// sseSession is an event stream's hold on its credential.
type sseSession struct {
	s          *Server
	secret     string
	x          *session
	mu         sync.Mutex
	closedWith string
}

func (x *sseSession) OnChange(f func()) func() bool { return x.x.OnChange(f) }
func (x *sseSession) Principal(ctx context.Context) (*reqctx.Principal, error) {
	return auth.Authenticate(ctx, x.s.DB, x.secret)
}

// sseStream writes one event stream's response; only its handler calls
// it. Every write has a deadline: a client that takes nothing for that long
// fails the write, and the handler ends the stream.
type sseStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	failed  bool
}

func (s *sseStream) write(b []byte) bool {
	if s.failed {
		return false
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := s.w.Write(b); err != nil || s.rc.Flush() != nil {
		s.failed = true // the connection is unusable after a timed-out write
		return false
	}
	return true
}

func (s *sseStream) event(name string, data []byte) bool {
	b := make([]byte, 0, len(name)+len(data)+16)
	b = append(append(append(b, "event: "...), name...), "\ndata: "...)
	b = append(append(b, data...), "\n\n"...) // JSON has no raw newlines
	return s.write(b)
}

func (s *sseStream) next(resp *graphql.Response) bool {
	b, err := json.Marshal(resp)
	if err != nil {
		return false
	}
	return s.event("next", b)
}

func (s *sseStream) complete() { s.event("complete", nil) }

// errors sends an error found outside execution as a `next` event.
func (s *sseStream) errors(e *errs.Error) {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	s.next(&graphql.Response{Errors: gqlerror.List{{Message: e.Message,
		Extensions: map[string]any{"code": string(e.Code), "details": e.Details}}}})
}

// keepAlive writes a comment line (proxies close silent connections).
func (s *sseStream) keepAlive() bool { return s.write([]byte(": keep-alive\n\n")) }
