package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
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
	return r.URL.Path == StreamPath && !isWebSocketUpgrade(r)
}

func (t sseTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	var params *graphql.RawParams
	var perr *errs.Error
	if r.Method == http.MethodGet {
		params, perr = paramsFromQuery(r.URL.RawQuery)
	} else {
		if e := jsonBody(r); e != nil {
			writeRequestError(w, mediaJSON, http.StatusUnsupportedMediaType, e)
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
	// owned: the stream has left the handler (detached) and cleans up
	// after itself when it ends.
	owned := false
	defer func() {
		if !owned {
			t.s.conns.Done()
		}
	}()
	// The request's deadline bounds a query or a mutation; a subscription
	// runs until it ends or its client leaves.
	deadline, bounded := r.Context().Deadline()
	// The stream's context ends with the request's (the client left) until
	// it detaches: net/http ends the request's context when the handler
	// returns, and a detached stream outlives it.
	base := withoutDeadline(r.Context())
	ctx, cancelCause := context.WithCancelCause(context.WithoutCancel(base))
	cancel := func() { cancelCause(nil) }
	unlink := context.AfterFunc(base, safe.Func(ctx, t.s.Log, "event stream request end", cancel))
	defer func() {
		if !owned {
			cancel()
		}
	}()
	p := reqctx.PrincipalFrom(ctx)
	tok, _ := auth.FromHeader(r.Header.Get("Authorization"))
	sess := &sseSession{s: t.s, secret: tok}
	sess.x = t.s.sessions.add(p, func(code websocket.StatusCode, reason string) {
		sess.mu.Lock()
		sess.closedWith = code
		st := sess.stream
		sess.mu.Unlock()
		if code == closeForbidden && st != nil {
			st.endWithin(ctx, t.s.Log, revokeGrace)
		}
		cancelCause(closeCause(code))
	})
	if sess.x == nil { // before any stream starts
		writeRequestError(w, mediaJSON, http.StatusTooManyRequests, t.s.sessions.errTooMany())
		return
	}
	defer func() {
		if !owned {
			t.s.sessions.remove(sess.x)
		}
	}()
	params.Headers = r.Header
	if len(r.Header.Values(reqctx.LastEventIDHeader)) > 1 {
		// One resume point: a proxy that reads the first and a server that
		// reads the last would disagree (as for a key twice in a body).
		writeRequestError(w, mediaJSON, http.StatusBadRequest, errs.Invalid(reqctx.LastEventIDHeader, "send one %s header", reqctx.LastEventIDHeader))
		return
	}
	if id := r.Header.Get(reqctx.LastEventIDHeader); id != "" {
		// A client reconnecting (EventSource does on its own) resumes
		// after the last event it received, whatever the document's
		// after says: the event subscriptions read it (resolvers'
		// subscribe and resumeAfter).
		ctx = reqctx.WithLastEventID(ctx, id)
	}
	ctx = reqctx.WithSession(ctx, sess)
	ctx, endErr := reqctx.WithEnd(ctx)
	oc, list := exec.CreateOperationContext(ctx, params)
	list = capErrors(list)
	if status := requestErrorStatus(mediaJSON, list); list != nil && status != http.StatusOK {
		// A refusal of the request itself (over the request budget, the
		// server busy) is answered as POST /graphql answers it, with its
		// status (and a 429's Retry-After), before any stream opens; only
		// the document's own errors stream as a result.
		writeResponse(w, mediaJSON, status, exec.DispatchError(graphql.WithOperationContext(ctx, oc), list))
		return
	}
	if list == nil && refusedGetMutation(w, r, responseType(r), oc) {
		return // before any stream opens, as for a refusal of the request
	}
	// A subscription over HTTP/1.1 leaves the handler once it has started
	// (detach): the connection is the stream's, its body chunked as
	// net/http began it, closed at its end.
	detach := list == nil && oc.Operation != nil && oc.Operation.Operation == ast.Subscription &&
		r.ProtoMajor == 1 && r.ProtoMinor >= 1

	// Long-lived: lift the server's write deadline.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if detach {
		h.Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	// The status and headers go out now: a client (or a proxy with a
	// response-header timeout) knows the stream is open before its first
	// event or keep-alive.
	_ = rc.Flush()
	st := &sseStream{w: w, rc: rc, timeout: t.s.Config.WS.WriteTimeout}
	if list != nil {
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, oc), list)
		st.requestErrors(resp)
		st.complete()
		return
	}
	if bounded && oc.Operation.Operation == ast.Subscription {
		// The request's deadline bounds the subscription's start, not the
		// subscription.
		ctx = reqctx.WithSetupDeadline(ctx, deadline)
	}
	end := func() { t.ending(ctx, st, sess, exec, oc, endErr) }
	if detach && st.hijack() {
		sess.mu.Lock()
		sess.stream = st
		revoked := sess.closedWith == closeForbidden
		sess.mu.Unlock()
		if revoked {
			st.endWithin(ctx, t.s.Log, revokeGrace)
		}
		owned = true
		unlink() // false: the client has left already, and ctx has ended
		t.detached(ctx, cancel, st, sess, exec, oc, renderKeyOf(p, params), end)
		return
	}
	drv := &sseDriver{wake: make(chan struct{}, 1)}
	ctx = reqctx.WithDriver(ctx, drv)
	if bounded && oc.Operation.Operation != ast.Subscription {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, deadline)
		defer stop()
	}
	responses, rctx := exec.DispatchOperation(ctx, oc)
	var tick <-chan time.Time
	if every := t.s.Config.WS.PingInterval; every > 0 {
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		tick = ticker.C
	}
	if oc.Operation.Operation == ast.Subscription && drv.skip != nil {
		if !t.driven(ctx, st, drv, rctx, responses, renderKeyOf(p, params), tick) {
			return // the client left or does not read
		}
	} else if !t.results(ctx, cancel, st, rctx, responses, tick) {
		return
	}
	end()
}

// ending writes why a stream ended, if not by the client (an error of the
// subscription, a revoked token, the server shutting down), and complete.
func (t sseTransport) ending(ctx context.Context, st *sseStream, sess *sseSession, exec graphql.GraphExecutor, oc *graphql.OperationContext, endErr func() error) {
	sess.mu.Lock()
	code := sess.closedWith
	sess.mu.Unlock()
	var cause *errs.Error // the session's close, as its operations ended
	if c := closeCause(code); c != nil {
		errors.As(c, &cause)
	}
	// A query or a mutation has one result: written already, it said why
	// it ended (its operation ended with the session's cause, closeCause),
	// and the stream's end adds none (a probe saw two results for one
	// mutation, its own error and then the stream's).
	// So has a subscription whose result already said why, failing as it
	// started (its context ended with the same cause).
	answered := oc.Operation != nil && oc.Operation.Operation != ast.Subscription && st.nexts.Load() > 0
	switch {
	case answered:
	case cause != nil && st.endedWith(cause.Code):
	case cause != nil:
		st.errors(cause)
	case endErr() != nil:
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, oc), gqlerror.List{gqlerror.WrapPath(nil, endErr())})
		st.next(resp)
	}
	st.complete()
}

// detached runs a subscription's stream on its own connection (hijacked,
// HTTP/1) after the handler has returned, as a WebSocket runs: the source's
// ready calls start a goroutine only while an event is pending, a timer
// sends the keep-alives, and a goroutine blocked reading the connection
// notices the client leaving. A stream then holds one goroutine (the
// reader) and neither the handler's stack nor net/http's buffers. At its
// end (the source's, a failed write, the client's) the stream writes its
// ending if the client is there, closes the connection and releases its
// session and its count in the server's connections.
func (t sseTransport) detached(ctx context.Context, cancel context.CancelFunc, st *sseStream, sess *sseSession, exec graphql.GraphExecutor, oc *graphql.OperationContext, key string, end func()) {
	log := t.s.Log
	var keepAlive *time.Timer
	var once sync.Once
	finish := func(ending bool) {
		once.Do(func() {
			if keepAlive != nil {
				keepAlive.Stop()
			}
			if ending {
				end()
			} else {
				// Ended without a word to the client: the log says why.
				log.InfoContext(ctx, "event stream ended", "requestId", reqctx.RequestID(ctx),
					"reason", st.endReason(), "events", st.nexts.Load())
			}
			st.close()
			cancel()
			t.s.sessions.remove(sess.x)
			t.s.conns.Done()
		})
	}
	// The reader notices the client leaving: a read returns when it does
	// (or when the stream's end closes the connection). A client has
	// nothing more to send (the response said Connection: close, and
	// nothing more is answered here); what it sends anyway (a stray CRLF,
	// a pipelined request, a GET's body, wherever TCP splits them) is
	// ignored up to sseIgnoredBytes, and past that the stream ends. The
	// reader reads on while the stream ends (closing with the client's
	// bytes unread would reset the connection, and a reset may lose the
	// stream's end on its way), up to sseDrainBytes, so a client that
	// sends without end does not keep it reading.
	safe.Go(ctx, log, "event stream reader", func() {
		defer st.readerDone()
		defer cancel() // the source ends, and its end finishes the stream
		src := io.Reader(st.conn)
		if st.early != nil {
			src = st.early
		}
		b := make([]byte, 64) // a stream's for its life: clients send nothing, mostly
		for read := 0; read <= sseDrainBytes; {
			n, err := src.Read(b)
			if err != nil {
				return
			}
			if read += n; read > sseIgnoredBytes {
				cancel()
			}
		}
	})
	drv := &wsDriver{ctx: ctx, log: log}
	drv.crashed = func() {
		reqctx.SetEnd(ctx, errs.E(errs.Internal, "internal error"))
		finish(true)
	}
	ctx = reqctx.WithDriver(ctx, drv)
	var responses graphql.ResponseHandler
	var rctx context.Context
	if safe.Do(ctx, log, "event stream start", func() { responses, rctx = exec.DispatchOperation(ctx, oc) }) {
		reqctx.SetEnd(ctx, errs.E(errs.Internal, "internal error"))
		finish(true)
		return
	}
	if drv.skip == nil {
		// The source does not offer to be driven (it failed as it
		// started): its results on this goroutine, then the end.
		finish(t.results(ctx, cancel, st, rctx, responses, nil))
		return
	}
	if every := t.s.Config.WS.PingInterval; every > 0 {
		// Started only once keepAlive is set (Reset orders the assignment
		// before the callback that reads it).
		keepAlive = time.AfterFunc(time.Duration(math.MaxInt64), safe.Func(ctx, log, "event stream keep-alive", func() {
			if st.keepAlive() {
				keepAlive.Reset(every)
			} else {
				cancel()
			}
		}))
		keepAlive.Reset(every)
	}
	drv.start(func(item any) bool {
		b, ended, err := t.s.render(rctx, drv.skip, responses, key, item)
		if err != nil {
			reqctx.SetEnd(ctx, err)
			ended = true
		}
		if ended {
			finish(true)
			return false
		}
		if !st.eventWithID("next", eventID(item), b) {
			finish(false) // the client left or does not read
			return false
		}
		return true
	})
}

// driven streams a subscription that its source drives (reqctx.Driver,
// as on a WebSocket): the handler waits for the source's ready calls and
// takes one item per call, executing it or taking the copy another
// subscription of the same operation and principal rendered (on either
// transport), so an event to many streams is executed once and a stream
// holds no goroutine but its handler. It returns false when the client
// left or does not read, true when the stream is to end with its reason
// (the source ended, the session was closed).
func (t sseTransport) driven(ctx context.Context, st *sseStream, drv *sseDriver, rctx context.Context, responses graphql.ResponseHandler, key string, tick <-chan time.Time) bool {
	for {
		select {
		case <-drv.wake:
		case <-tick:
			if !st.keepAlive() {
				return false
			}
			continue
		case <-ctx.Done():
			return true
		}
		for {
			item, ok := drv.take()
			if !ok {
				break
			}
			var b []byte
			var ended bool
			var err error
			if safe.Do(ctx, t.s.Log, "event stream execution", func() {
				b, ended, err = t.s.render(rctx, drv.skip, responses, key, item)
			}) {
				reqctx.SetEnd(ctx, errs.E(errs.Internal, "internal error"))
				return true
			}
			if err != nil {
				reqctx.SetEnd(ctx, err)
				return true
			}
			if ended {
				return true
			}
			if !st.eventWithID("next", eventID(item), b) {
				return false
			}
		}
	}
}

// results streams an operation's results as they come: a query's or a
// mutation's one, or those of a subscription whose source does not offer
// to be driven. The handler is the stream's only writer, and it writes
// nothing after it returns: net/http recycles the response's buffers then,
// and a write from a goroutine or a timer that outlived the handler crashed
// the process. Results are executed on a goroutine that never touches the
// response and that the handler waits for before it returns; keep-alives
// come from the handler's own loop. A write that takes longer than
// Config.WS.WriteTimeout (the client does not read) ends the stream; the
// results goroutine then stops at its next send, so a stuck client holds
// the subscription's small buffer and one rendered result, never a queue.
// A result is handed over as its JSON: the executor may reuse a response's
// buffers for the next one. cancel ends the operation (and so the
// goroutine). It returns as driven does.
func (t sseTransport) results(ctx context.Context, cancel context.CancelFunc, st *sseStream, rctx context.Context, responses graphql.ResponseHandler, tick <-chan time.Time) bool {
	type result struct {
		b      []byte
		failed *string
	}
	results := make(chan result)
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
				case results <- result{b, failedCode(resp)}:
				case <-ctx.Done():
					return
				}
			}
		}, func() {
			reqctx.SetEnd(ctx, errs.E(errs.Internal, "internal error"))
		})
	})
	// gone ends the operation and waits for the results goroutine to
	// end, when the client left (when results closed, it has ended).
	gone := func() bool {
		cancel()
		for range results {
		}
		return false
	}
	for {
		select {
		case r, ok := <-results:
			if !ok {
				return true
			}
			if !st.nextFailed(r.b, r.failed) {
				return gone()
			}
		case <-tick:
			if !st.keepAlive() {
				return gone()
			}
		}
	}
}

// sseDriver is an event stream's reqctx.Driver: the source's ready calls
// queue their items and wake the handler, which takes them in order.
type sseDriver struct {
	skip    func() // set by the resolver before DispatchOperation returns
	wake    chan struct{}
	mu      sync.Mutex
	pending []any // nil is the end
}

func (d *sseDriver) Attach(skip func()) { d.skip = skip }

func (d *sseDriver) Ready() func(item any) {
	return func(item any) {
		d.mu.Lock()
		d.pending = append(d.pending, item)
		d.mu.Unlock()
		select {
		case d.wake <- struct{}{}:
		default: // a wake is pending; the handler takes every item queued
		}
	}
}

func (d *sseDriver) take() (any, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) == 0 {
		d.pending = nil // lets the slice's array go while idle
		return nil, false
	}
	item := d.pending[0]
	d.pending[0] = nil
	d.pending = d.pending[1:]
	return item, true
}

// sseSession is an event stream's hold on its credential.
type sseSession struct {
	s          *Server
	secret     string
	x          *session
	mu         sync.Mutex
	closedWith websocket.StatusCode // the session's close code (0: open)
	stream     *sseStream           // once it has its connection (detached)
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
	werr    error        // the write that failed (under mu once hijacked)
	nexts   atomic.Int64 // next events written
	// lastCode is the error code of the last next event when it was a
	// result without data (the operation failed as a whole: a
	// subscription cancelled as it started), "" otherwise: the stream's
	// end does not say the same once more.
	lastCode atomic.Pointer[string]
	// deadline is the connection's write deadline as last set. Setting it
	// is a timer update; with an event to thousands of streams at once it
	// is moved only once a quarter of it has passed, so a write may take
	// from three quarters of timeout to all of it.
	deadline time.Time
	// conn, once the stream has its connection (hijack): the stream is
	// written to it as chunks, by whoever holds mu (a detached stream's
	// writers are its event goroutine and its keep-alive timer).
	conn net.Conn
	mu   sync.Mutex
	// early holds what the client sent after its request that net/http
	// had read already; nil when it had none.
	early *bufio.Reader
	// Who closes the connection: the reader once it has quit reading, or
	// the stream's end (close) once the reader has.
	life       sync.Mutex
	readerGone bool
	closing    bool
}

// sseIgnoredBytes is how much a detached stream's client may send after
// its request before its stream ends, and sseDrainBytes how much is read
// before the connection closes with the rest unread.
const (
	sseIgnoredBytes = 1024
	sseDrainBytes   = 64 << 10
)

// hijack takes the connection from net/http once the headers are out
// (chunked, Connection: close). It says false when it cannot (HTTP/2).
func (s *sseStream) hijack() bool {
	conn, brw, err := s.rc.Hijack()
	if err != nil {
		return false
	}
	// The server's deadlines stay on a hijacked connection: lift them.
	_ = conn.SetDeadline(time.Time{})
	streamSocket(conn)
	if brw.Writer.Buffered() > 0 {
		_ = brw.Writer.Flush()
	}
	if brw.Reader.Buffered() > 0 {
		s.early = brw.Reader
	}
	s.conn, s.deadline = conn, time.Time{}
	return true
}

// write writes parts as one piece of the stream and flushes it.
func (s *sseStream) write(parts ...[]byte) bool {
	if s.conn != nil {
		return s.writeChunk(parts)
	}
	if s.failed {
		return false
	}
	if now := time.Now(); s.deadline.Sub(now) < s.timeout*3/4 {
		s.deadline = now.Add(s.timeout)
		_ = s.rc.SetWriteDeadline(s.deadline)
	}
	for _, p := range parts {
		if _, err := s.w.Write(p); err != nil {
			s.failed = true // the connection is unusable after a timed-out write
			return false
		}
	}
	if s.rc.Flush() != nil {
		s.failed = true
		return false
	}
	return true
}

// writeChunk writes parts as one chunk of the response's chunked body,
// in one write.
func (s *sseStream) writeChunk(parts [][]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return false
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n == 0 { // a chunk of 0 bytes ends the body
		return true
	}
	buf := getBuffer()
	defer putBuffer(buf)
	b := append(strconv.AppendInt((*buf)[:0], int64(n), 16), "\r\n"...)
	for _, p := range parts {
		b = append(b, p...)
	}
	b = append(b, "\r\n"...)
	*buf = b
	if now := time.Now(); s.deadline.Sub(now) < s.timeout*3/4 {
		s.deadline = now.Add(s.timeout)
		_ = s.conn.SetWriteDeadline(s.deadline)
	}
	if _, err := s.conn.Write(b); err != nil {
		s.failed, s.werr = true, err // the connection is unusable after a timed-out write
		return false
	}
	return true
}

// endReason says why a detached stream ended without its ending written:
// its write deadline passed (the client took nothing for that long: it
// stopped reading, or reads slower than its events come), or the
// connection failed or closed under a write.
func (s *sseStream) endReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.werr == nil:
		return "client-left"
	case errors.Is(s.werr, os.ErrDeadlineExceeded):
		return "write-timeout"
	}
	return "write-failed"
}

// close ends a hijacked stream's body (the last chunk) and its side of
// the connection; the handler's response ends with the handler otherwise.
// The connection closes once the client has closed its side too, within
// sseLinger (closing with the client's bytes unread would reset the
// connection, and a reset may lose the stream's end on its way), or at
// once when the reader has quit.
func (s *sseStream) close() {
	if s.conn == nil {
		return
	}
	s.mu.Lock()
	ended := false
	if !s.failed {
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.timeout))
		_, err := s.conn.Write([]byte("0\r\n\r\n"))
		ended = err == nil
		s.failed = true
	}
	s.mu.Unlock()
	if cw, ok := s.conn.(interface{ CloseWrite() error }); ok && ended {
		_ = cw.CloseWrite()
	}
	s.life.Lock()
	s.closing = true
	gone := s.readerGone
	s.life.Unlock()
	if gone || !ended {
		_ = s.conn.Close() // the reader, if it reads still, quits
		return
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(sseLinger))
}

// endWithin bounds the end of a detached stream whose credential was
// revoked: its ending, written after the event being written, has d to
// reach the client and the client to close the connection; then the
// connection is reset (resetConn), with what the kernel held for it.
func (s *sseStream) endWithin(ctx context.Context, log *slog.Logger, d time.Duration) {
	time.AfterFunc(d, safe.Func(ctx, log, "event stream reset", func() {
		s.life.Lock()
		gone := s.readerGone
		s.life.Unlock()
		if !gone {
			resetConn(s.conn)
		}
	}))
}

// sseLinger is how long a detached stream waits for its client to close
// the connection after the stream's end.
const sseLinger = 2 * time.Second

// readerDone is the reader's end: it closes the connection if the stream
// has ended.
func (s *sseStream) readerDone() {
	s.life.Lock()
	s.readerGone = true
	closing := s.closing
	s.life.Unlock()
	if closing {
		_ = s.conn.Close()
	}
}

var (
	sseData = []byte("\ndata: ")
	sseID   = []byte("\nid: ")
	sseEnd  = []byte("\n\n")
	sseNext = []byte("event: next")
)

func (s *sseStream) event(name string, data []byte) bool { return s.eventWithID(name, "", data) }

// eventWithID writes an event with an id line when id is not empty: an
// EventSource remembers the last one and sends it as Last-Event-ID when it
// reconnects, and the stream resumes after it.
func (s *sseStream) eventWithID(name, id string, data []byte) bool {
	ev := sseNext
	if name != "next" {
		ev = []byte("event: " + name)
	}
	var ok bool
	if id != "" {
		ok = s.write(ev, sseID, []byte(id), sseData, data, sseEnd)
	} else {
		ok = s.write(ev, sseData, data, sseEnd) // JSON has no raw newlines
	}
	if ok && name == "next" {
		s.nexts.Add(1)
		s.lastCode.Store(nil)
	}
	return ok
}

// eventID is the id of a subscription's item when it is an event of a
// tenant's stream ("" for anything else).
func eventID(item any) string {
	if ev, ok := item.(*events.Event); ok && ev != nil && !strings.ContainsAny(ev.EventID, "\r\n") {
		return ev.EventID
	}
	return ""
}

func (s *sseStream) next(resp *graphql.Response) bool {
	b, err := json.Marshal(resp)
	if err != nil {
		return false
	}
	return s.nextFailed(b, failedCode(resp))
}

// nextFailed writes a result's JSON as a next event; failed is its
// failedCode.
func (s *sseStream) nextFailed(b []byte, failed *string) bool {
	ok := s.event("next", b)
	if ok && failed != nil {
		s.lastCode.Store(failed)
	}
	return ok
}

// failedCode is the code of a result without data (the operation failed
// as a whole), nil for any other.
func failedCode(resp *graphql.Response) *string {
	if len(resp.Errors) == 0 || len(resp.Data) != 0 && string(resp.Data) != "null" {
		return nil
	}
	code := fmt.Sprint(resp.Errors[0].Extensions["code"]) // a string, or errs.Code
	return &code
}

// endedWith says whether the last next event was a failed result with
// the code.
func (s *sseStream) endedWith(code errs.Code) bool {
	c := s.lastCode.Load()
	return c != nil && *c == string(code)
}

func (s *sseStream) complete() { s.event("complete", nil) }

// requestErrors sends errors found outside execution (the request's, or
// the stream's end: a revoked token, a shutdown) as a `next` event whose
// result has no data entry: nothing was executed, and the GraphQL spec's
// response for an error raised before execution has none (graphql.Response
// writes "data": null).
func (s *sseStream) requestErrors(resp *graphql.Response) bool {
	b, err := json.Marshal(struct {
		Errors     gqlerror.List  `json:"errors"`
		Extensions map[string]any `json:"extensions,omitempty"`
	}{resp.Errors, resp.Extensions})
	if err != nil {
		return false
	}
	return s.event("next", b)
}

// errors sends an error found outside execution as a `next` event.
func (s *sseStream) errors(e *errs.Error) {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	s.requestErrors(&graphql.Response{Errors: gqlerror.List{{Message: e.Message,
		Extensions: map[string]any{"code": string(e.Code), "details": e.Details}}}})
}

// keepAlive writes a comment line (proxies close silent connections).
func (s *sseStream) keepAlive() bool { return s.write(sseKeepAlive) }

var sseKeepAlive = []byte(": keep-alive\n\n")
