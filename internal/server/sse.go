package server

import (
	"bytes"
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
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
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
	// Long-lived: lift the server's write deadline.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &sseStream{w: w, rc: rc}
	if perr != nil {
		st.errors(perr)
		return
	}
	params.Headers = r.Header

	t.s.conns.Add(1)
	defer t.s.conns.Done()
	ctx, cancel := context.WithCancel(r.Context())
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
	defer t.s.sessions.remove(sess.x)
	ctx = reqctx.WithSession(ctx, sess)
	ctx, endErr := reqctx.WithEnd(ctx)

	oc, list := exec.CreateOperationContext(ctx, params)
	if list != nil {
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, oc), list)
		st.next(resp)
		st.complete()
		return
	}
	stop := st.keepAlive(t.s.Config.WS.PingInterval)
	defer stop()
	responses, rctx := exec.DispatchOperation(ctx, oc)
	for {
		resp := responses(rctx)
		if resp == nil {
			break
		}
		if !st.next(resp) {
			return // the client left
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

// sseStream writes events; writes are serialised (keep-alives come from a
// timer).
type sseStream struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sseStream) event(name string, data []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b bytes.Buffer
	b.WriteString("event: ")
	b.WriteString(name)
	b.WriteString("\ndata: ")
	b.Write(data) // JSON has no raw newlines
	b.WriteString("\n\n")
	_ = s.rc.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
	if _, err := s.w.Write(b.Bytes()); err != nil {
		return false
	}
	return s.rc.Flush() == nil
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

// keepAlive writes a comment line every interval (proxies close silent
// connections).
func (s *sseStream) keepAlive(every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	var t *time.Timer
	var mu sync.Mutex
	stopped := false
	var tick func()
	tick = func() {
		s.mu.Lock()
		_ = s.rc.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
		_, err := io.WriteString(s.w, ": keep-alive\n\n")
		if err == nil {
			_ = s.rc.Flush()
		}
		s.mu.Unlock()
		mu.Lock()
		if !stopped {
			t.Reset(every)
		}
		mu.Unlock()
	}
	mu.Lock()
	t = time.AfterFunc(every, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}
