package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonkeys"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/rest"
	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/store"
)

// The graphql-transport-ws protocol
// (https://github.com/enisdenjo/graphql-ws/blob/master/PROTOCOL.md), served
// here rather than by gqlgen's transport, which closes every protocol
// violation with 1002 or 1000, authenticates once for the life of the
// socket, and blocks a connection on a slow writer.
const (
	wsProtocol = "graphql-transport-ws"

	closeBadRequest    = 4400 // an invalid message
	closeUnauthorized  = 4401 // subscribe before connection_ack
	closeForbidden     = 4403 // connection_init refused; the credential was revoked
	closeInitTimeout   = 4408 // no connection_init in time
	closeDuplicateID   = 4409 // an operation id already in use
	closeTooManyInits  = 4429 // a second connection_init
	closeInternal      = 4500
	closeServiceReboot = 1012 // the server is shutting down: reconnect elsewhere
	closeSlowConsumer  = 1013 // try again later: the client does not read
	closeTryAgainLater = 1013 // try again later: the database is unavailable
	closePolicy        = 1008 // the credential holds too many sockets and streams; the client answers no ping

	// wsMaxOperations bounds the operations running at once on one socket
	// (a dashboard needs a handful); past it a subscribe gets an error
	// message and the socket stays open.
	wsMaxOperations = 64
)

// WSTimings are the timers of the long-lived transports (WebSocket and
// event streams); zero values take the defaults.
type WSTimings struct {
	InitTimeout  time.Duration // connection_init must arrive within it (10 s)
	PingInterval time.Duration // a WebSocket is pinged, an event stream sent a keep-alive comment (15 s; negative: never)
	// WriteTimeout is how long one write to a client may take (10 s): a
	// client that takes nothing for that long is a slow consumer, and its
	// socket or stream is closed.
	WriteTimeout time.Duration
	// PongTimeout is how long a WebSocket may send nothing, not even the
	// pong graphql-transport-ws requires in answer to every ping, before
	// it is closed (30 s; checked at each ping): a client that hangs, or
	// whose host vanished, no longer holds its socket and its credential's
	// session slot while its kernel still takes the pings.
	PongTimeout time.Duration
}

func (s *Server) websocket() graphql.Transport { return wsTransport{s: s} }

type wsTransport struct{ s *Server }

func (wsTransport) Supports(r *http.Request) bool { return isWebSocketUpgrade(r) }

func (t wsTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	sb := &smallBuffers{ResponseWriter: w}
	c, err := websocket.Accept(sb, r, &websocket.AcceptOptions{
		Subprotocols:   []string{wsProtocol},
		OriginPatterns: t.s.Config.AllowedOrigins,
	})
	if err != nil {
		t.refuse(w, r, sb.refused)
		return
	}
	if c.Subprotocol() != wsProtocol {
		_ = c.Close(4406, "Subprotocol not acceptable: use "+wsProtocol)
		return
	}
	c.SetReadLimit(rest.DefaultMaxBody)
	// The socket outlives the request: it keeps only the upgrade's request
	// id and client address, and its reader runs on a goroutine of its own, so neither the
	// request (headers, router state) nor the handler chain's deep stack
	// stays alive for every open socket.
	ctx, cancelCause := context.WithCancelCause(reqctx.Detach(r.Context()))
	conn := &wsConn{
		s: t.s, c: c, raw: sb.conn, wmu: make(chan struct{}, 1), exec: exec, ctx: ctx,
		cancel: func() { cancelCause(nil) }, cancelCause: cancelCause,
		ops: map[string]*wsOp{},
		ip:  clientIP(r),
	}
	t.s.conns.Add(1)
	t.s.sessions.track(conn)
	safe.Go(ctx, t.s.Log, "websocket reader", func() {
		defer t.s.conns.Done()
		defer t.s.sessions.untrack(conn)
		conn.serve()
	}, func() { conn.close(closeInternal, "internal error") })
}

// refuse answers an upgrade Accept refused (status, which it held back)
// with the contract's error, as every other refusal is answered, instead
// of coder/websocket's plain text; it names what was wrong without
// echoing the request's headers. Status 0: Accept failed after it had
// taken the connection, and nothing can be written.
func (t wsTransport) refuse(w http.ResponseWriter, r *http.Request, status int) {
	var err error
	switch status {
	case 0:
		return
	case http.StatusForbidden:
		err = errs.E(errs.PermissionDenied, "a WebSocket may be opened only from this server's own origin or one of COMPUTE_ALLOWED_ORIGINS; this request's Origin is neither").
			With("reason", "origin")
	case http.StatusMethodNotAllowed:
		err = errs.E(errs.MethodNotAllowed, "a WebSocket upgrade is a GET request")
	case http.StatusBadRequest, http.StatusUpgradeRequired:
		err = errs.E(errs.InvalidInput, "not a valid WebSocket upgrade request (RFC 6455: Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key)")
	default:
		err = errs.E(errs.Internal, "internal error")
	}
	t.s.rest.WriteError(w, r, err)
}

// wsMessage is one protocol message.
type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type wsConn struct {
	s *Server
	c *websocket.Conn
	// raw is the connection under c: an event's message is framed here and
	// written to it in one write (coder/websocket's write path, its locks
	// and message writer, was a sixth of the server's work when an event
	// goes to 10,000 sockets). wmu orders every message the server writes,
	// through c or raw; what c writes on its own (a pong to the client's
	// ping, a close frame) is one write of the connection, which the
	// connection keeps whole.
	raw    net.Conn
	wmu    chan struct{}
	exec   graphql.GraphExecutor
	ctx    context.Context
	cancel context.CancelFunc
	// cancelCause ends ctx with why the socket was closed (closeCause):
	// its operations still running end with that error.
	cancelCause context.CancelCauseFunc
	ip          string

	mu       sync.Mutex
	ops      map[string]*wsOp // the running operations by id
	initSeen bool
	acked    bool
	heard    atomic.Int64 // when the client's last message came (UnixNano)
	// heardPaused is the pause clock then (pauses.at, ns).
	heardPaused atomic.Int64
	secret      string // the bearer token, to authenticate each operation again
	session     *session
	closed      bool
}

func (c *wsConn) serve() {
	defer c.cancel()
	timings := c.s.Config.WS
	c.hear(time.Now())
	// The timers may fire after serve has returned: they write only
	// through the websocket connection, which refuses writes once closed
	// (it owns the hijacked connection; net/http recycles nothing of it).
	// The timer waits for the client's connection_init, not for the
	// server's answer to it: authenticating has its own deadline.
	init := time.AfterFunc(timings.InitTimeout, safe.Func(c.ctx, c.s.Log, "websocket init timer", func() {
		c.mu.Lock()
		seen := c.initSeen
		c.mu.Unlock()
		if !seen {
			c.close(closeInitTimeout, "Connection initialisation timeout")
		}
	}))
	defer init.Stop()
	if timings.PingInterval > 0 {
		// A timer, not a goroutine per socket: it pings, then sets itself
		// again while the socket is open.
		// Silence is judged without the time this process did not run
		// since the client was last heard (pauses).
		pauses.start()
		var ping *time.Timer
		var mu sync.Mutex
		mu.Lock()
		ping = time.AfterFunc(timings.PingInterval, safe.Func(c.ctx, c.s.Log, "websocket ping", func() {
			now, heard := time.Now(), time.Unix(0, c.heard.Load())
			paused := pauses.at(now) - time.Duration(c.heardPaused.Load())
			if silentTooLong(now, heard, paused, timings.PongTimeout) {
				c.close(closePolicy, fmt.Sprintf("no message for %s: the client answers no ping", now.Sub(heard).Round(100*time.Millisecond)))
				return
			}
			if c.send(wsMessage{Type: "ping"}) {
				mu.Lock()
				ping.Reset(timings.PingInterval)
				mu.Unlock()
			}
		}))
		mu.Unlock()
		defer ping.Stop()
	}
	for {
		// Never a cancellable context: coder/websocket drops the connection
		// without a close frame when a read's context ends.
		typ, data, err := c.c.Read(context.Background())
		c.hear(time.Now())
		if err != nil {
			code := websocket.StatusNormalClosure
			if websocket.CloseStatus(err) == -1 && c.ctx.Err() == nil && !errors.Is(err, io.EOF) &&
				!errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) {
				// A frame the library refused without a close of its own
				// (an unmasked frame from the client): a protocol error,
				// RFC 6455 7.4.1.
				code = websocket.StatusProtocolError
			}
			c.close(code, "")
			return
		}
		if typ != websocket.MessageText {
			c.close(closeBadRequest, "Invalid message received: messages are JSON text")
			return
		}
		if !utf8.Valid(data) { // RFC 6455 8.1
			c.close(websocket.StatusInvalidFramePayloadData, "Invalid message received: text is not UTF-8")
			return
		}
		if !c.handleShallow(data) {
			return
		}
	}
}

// handleShallow runs handle on a goroutine of its own and waits for it:
// handling a message goes deep (authentication reads the database,
// subscribe starts an operation), and a goroutine's stack keeps the size
// it grew to while it is parked, so the reader, parked for the socket's
// whole life, would hold 8 KiB where it needs 2.
func (c *wsConn) handleShallow(data []byte) bool {
	ok := false
	done := make(chan struct{})
	safe.Go(c.ctx, c.s.Log, "websocket message", func() {
		defer close(done)
		ok = c.handle(data)
	}, func() { c.close(closeInternal, "internal error") })
	<-done
	return ok
}

// hear notes a message from the client at now.
func (c *wsConn) hear(now time.Time) {
	c.heardPaused.Store(int64(pauses.at(now)))
	c.heard.Store(now.UnixNano())
}

// handle processes one message; false ends the connection.
func (c *wsConn) handle(data []byte) bool {
	// Bounded before anything decodes it, as a POST body is (DecodeParams):
	// a message is a body one level down; a connection_init or a ping
	// nested 10,000 deep, before any authentication, was decoded whole.
	if jsonkeys.NestsDeeper(data, maxBodyDepth+1) || jsonkeys.HoldsMore(data, maxBodyValues+8) {
		c.close(closeBadRequest, fmt.Sprintf("Invalid message received: it nests deeper than %d levels or holds more than %d values", maxBodyDepth+1, maxBodyValues+8))
		return false
	}
	var m wsMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil || m.Type == "" || dec.More() {
		c.close(closeBadRequest, "Invalid message received")
		return false
	}
	if _, dup := jsonkeys.Duplicate(data); dup {
		c.close(closeBadRequest, "Invalid message received: a key appears twice")
		return false
	}
	// As graphql-ws's validateMessage: a ping's or pong's payload is an
	// object or absent, and a complete names its operation (a string
	// ping payload was echoed back, a complete without an id ignored).
	switch {
	case (m.Type == "ping" || m.Type == "pong") && !objectOrAbsent(m.Payload):
		c.close(closeBadRequest, `Invalid message received: "payload" must be an object or missing`)
		return false
	case m.Type == "complete" && m.ID == "":
		c.close(closeBadRequest, `Invalid message received: "id" must be a string`)
		return false
	}
	switch m.Type {
	case "connection_init":
		return c.init(m.Payload)
	case "ping":
		c.send(wsMessage{Type: "pong", Payload: m.Payload})
	case "pong":
	case "subscribe":
		return c.subscribe(m)
	case "complete":
		// The id is free at once (as graphql-ws's own server does): the
		// client may subscribe with it again in its next message. Nothing
		// more of the old operation goes out: a message of it being
		// written is waited for, before the next message is read.
		c.mu.Lock()
		op := c.ops[m.ID]
		delete(c.ops, m.ID)
		c.mu.Unlock()
		if op != nil {
			op.end()
		}
	default:
		c.close(closeBadRequest, "Invalid message received: unknown type "+truncate(m.Type, 32))
		return false
	}
	return true
}

// objectOrAbsent says a message's payload is a JSON object, null or absent.
func objectOrAbsent(p json.RawMessage) bool {
	t := bytes.TrimSpace(p)
	return len(t) == 0 || t[0] == '{' || string(t) == "null"
}

func (c *wsConn) init(payload json.RawMessage) bool {
	c.mu.Lock()
	if c.initSeen {
		c.mu.Unlock()
		c.close(closeTooManyInits, "Too many initialisation requests")
		return false
	}
	c.initSeen = true
	c.mu.Unlock()
	var p map[string]any
	if len(payload) > 0 && !isNull(payload) {
		if json.Unmarshal(payload, &p) != nil {
			c.close(closeBadRequest, "Invalid message received: connection_init payload must be an object")
			return false
		}
	}
	h, _ := p["Authorization"].(string)
	if h == "" {
		h, _ = p["authorization"].(string)
	}
	tok, ok := auth.FromHeader(h)
	if !ok {
		c.close(closeForbidden, "Forbidden: connection_init needs {\"Authorization\": \"Bearer <token>\"}")
		return false
	}
	actx, cancel := context.WithTimeout(c.ctx, c.s.Config.RequestTimeout)
	pr, err := c.s.authenticateSecret(actx, c.ip, tok, "graphql")
	cancel()
	if err != nil {
		code := errs.CodeOf(err)
		if e := store.Classify(err); e != nil {
			code = e.Code // the database: unreachable, busy, or past the deadline
		}
		switch code {
		case errs.Unauthenticated:
			c.close(closeForbidden, "Forbidden: unknown or revoked bearer token")
		case errs.RateLimited:
			c.close(closeForbidden, "Forbidden: too many failed authentications; retry later")
		case errs.Unavailable:
			// 1013, try again later: graphql-ws clients retry it, where
			// they give up on 4500.
			c.close(closeTryAgainLater, "the database is unavailable; retry")
		default:
			c.s.Log.Error("websocket authentication", "err", err)
			c.close(closeInternal, "Internal server error")
		}
		return false
	}
	sess := c.s.sessions.add(pr, c.close)
	if sess == nil {
		// 1008, policy violation: graphql-ws clients do not retry it.
		c.close(closePolicy, truncate(c.s.sessions.errTooMany().Message, 120))
		return false
	}
	c.mu.Lock()
	if c.closed { // closed meanwhile (the init timeout, a shutdown)
		c.mu.Unlock()
		c.s.sessions.remove(sess)
		return false
	}
	c.secret, c.acked, c.session = tok, true, sess
	c.mu.Unlock()
	c.send(wsMessage{Type: "connection_ack"})
	return true
}

// wsMaxID bounds an operation's id (the protocol sets none; a client's
// ids are counters or UUIDs).
const wsMaxID = 128

func (c *wsConn) subscribe(m wsMessage) bool {
	c.mu.Lock()
	acked := c.acked
	c.mu.Unlock()
	if !acked {
		c.close(closeUnauthorized, "Unauthorized")
		return false
	}
	switch {
	case m.ID == "":
		c.close(closeBadRequest, "Invalid message received: subscribe needs an id")
		return false
	case len(m.ID) > wsMaxID:
		c.close(closeBadRequest, fmt.Sprintf("Invalid message received: a subscribe id has at most %d bytes", wsMaxID))
		return false
	}
	params, perr := DecodeParams(m.Payload)
	// A query's hash alone (Apollo's automatic persisted queries) is a
	// valid message this server does not serve: the operation's error, in
	// the words the client looks for before sending the whole query; the
	// socket stays.
	apq := perr != nil && perr.Details["reason"] == "persisted-queries-not-supported"
	// Variables or extensions past their bounds are the operation's error,
	// as over HTTP; the socket and its other operations stay.
	opErr := apq || (perr != nil && (perr.Details["path"] == "variables" || perr.Details["path"] == "extensions"))
	if perr != nil && !opErr {
		c.close(closeBadRequest, "Invalid message received: "+perr.Message)
		return false
	}
	c.mu.Lock()
	if _, dup := c.ops[m.ID]; dup {
		c.mu.Unlock()
		c.close(closeDuplicateID, "Subscriber for "+truncate(m.ID, 64)+" already exists")
		return false
	}
	if opErr {
		c.mu.Unlock()
		b, _ := json.Marshal(gqlerror.List{{Message: perr.Message, Extensions: map[string]any{"code": string(perr.Code), "details": perr.Details}}})
		c.send(wsMessage{ID: m.ID, Type: "error", Payload: b})
		return true
	}
	if len(c.ops) >= wsMaxOperations {
		c.mu.Unlock()
		b, _ := json.Marshal(gqlerror.List{{Message: fmt.Sprintf("too many operations on this socket (at most %d at once); complete one first", wsMaxOperations),
			Extensions: map[string]any{"code": string(errs.RateLimited), "details": map[string]any{"reason": "operations", "limit": wsMaxOperations}}}})
		c.send(wsMessage{ID: m.ID, Type: "error", Payload: b})
		return true
	}
	var tokenID string
	if c.session != nil {
		tokenID = c.session.tokenID
	}
	c.mu.Unlock()
	key := reqctx.CallerKey(c.ctx, &reqctx.Principal{TokenID: tokenID}) // the credential's, as every request's
	// The operation pays its first unit here, in the order the client sent
	// it and before anything of it runs, as an HTTP request does before its
	// body is read: a subscribe the client completes a millisecond later is
	// still a request (3,000 subscribe and complete pairs in 1.7 s spent
	// nothing, each authenticated against the database).
	if e := c.s.overBudget(c.ctx, key); e != nil {
		b, _ := json.Marshal(gqlerror.List{{Message: e.Message, Extensions: map[string]any{"code": string(e.Code), "details": e.Details}}})
		c.send(wsMessage{ID: m.ID, Type: "error", Payload: b})
		return true
	}
	c.mu.Lock() // (only this loop adds operations: the id is still free)
	ctx, stop := context.WithCancel(withLiterals(reqctx.WithAdmitted(reqctx.WithRequestID(c.ctx, newRequestID()))))
	op := &wsOp{id: m.ID, cancel: stop}
	c.ops[m.ID] = op
	c.mu.Unlock()
	safe.Go(ctx, c.s.Log, "websocket operation", func() { c.run(ctx, op, params) }, func() { c.crashed(ctx, op) })
	return true
}

// wsOp is one running operation of a socket. Its messages go out through
// send, which serialises them with its end: once it has ended (its error
// or complete sent, or the client's complete received), nothing more of it
// is sent, so an id the client reuses never receives the old operation's
// messages.
type wsOp struct {
	id     string
	cancel context.CancelFunc
	mu     sync.Mutex
	ended  bool
}

// send writes a message of the operation unless it has ended; an error or
// a complete ends it. event says it is a subscription's event (sendEvent).
func (op *wsOp) send(c *wsConn, m wsMessage, event bool) bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.ended {
		return false
	}
	m.ID = op.id
	if m.Type == "error" || m.Type == "complete" {
		op.ended = true
	}
	if event {
		return c.sendEvent(m)
	}
	return c.send(m)
}

// end ends the operation without a message (the client completed it),
// after any message of it being written.
func (op *wsOp) end() {
	op.mu.Lock()
	op.ended = true
	op.mu.Unlock()
	op.cancel()
}

// finish is the operation's end on the server's side: its id is freed,
// then complete is sent unless the operation has ended already.
func (c *wsConn) finish(op *wsOp) {
	c.mu.Lock()
	if c.ops[op.id] == op {
		delete(c.ops, op.id)
	}
	c.mu.Unlock()
	op.cancel()
	if c.ctx.Err() == nil {
		op.send(c, wsMessage{Type: "complete"}, false)
	}
}

// crashed ends an operation whose goroutine panicked (safe logged it)
// with an INTERNAL error naming its request id.
func (c *wsConn) crashed(ctx context.Context, op *wsOp) {
	b, _ := json.Marshal(gqlerror.List{{Message: "internal error", Extensions: map[string]any{"code": string(errs.Internal),
		"details": map[string]any{"requestId": reqctx.RequestID(ctx)}}}})
	op.send(c, wsMessage{Type: "error", Payload: b}, false)
	c.finish(op)
}

// run executes one operation. The credential is authenticated again, so a
// revoked token or a removed role takes effect on the next operation. A
// subscription whose resolver accepts the socket's driver (instanceEvents
// does) is then driven by its events: run returns, and a goroutine exists
// for it only while it has an event to execute and write.
func (c *wsConn) run(ctx context.Context, op *wsOp, params *graphql.RawParams) {
	driven := false
	defer func() {
		if driven {
			return
		}
		if v := recover(); v != nil {
			panic(v) // safe logs it, and crashed ends the operation with INTERNAL
		}
		c.finish(op)
	}()
	ctx = graphql.StartOperationTrace(ctx)
	fail := func(e *errs.Error) {
		b, _ := json.Marshal(gqlerror.List{{Message: e.Message, Extensions: map[string]any{"code": string(e.Code), "details": e.Details}}})
		op.send(c, wsMessage{Type: "error", Payload: b}, false)
	}
	// The operation's deadline: a query's or a mutation's whole run, its
	// authentication included, and a subscription's start (it outlives
	// it). Authenticated on the socket's context alone, an operation sent
	// while the database was frozen waited for it to come back.
	deadline := time.Now().Add(c.s.Config.RequestTimeout)
	actx, authDone := context.WithDeadline(ctx, deadline)
	p, err := auth.Authenticate(actx, c.s.DB, c.secret)
	if err != nil {
		defer authDone() // after the error is classified on actx (its deadline)
		if errs.CodeOf(err) == errs.Unauthenticated {
			c.close(closeForbidden, "Forbidden: the bearer token was revoked")
			return
		}
		fail(rest.PublicError(actx, c.s.Log, err, "transport", "websocket", "step", "authentication"))
		return
	}
	authDone()
	ctx = reqctx.WithPrincipal(ctx, p)
	ctx = reqctx.WithSession(ctx, c)
	ctx, endErr := reqctx.WithEnd(ctx)
	drv := &wsDriver{ctx: ctx, log: c.s.Log, crashed: func() { c.crashed(ctx, op) }}
	ctx = reqctx.WithDriver(ctx, drv)
	oc, list := c.exec.CreateOperationContext(ctx, params)
	list = capErrors(list)
	if list != nil {
		resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, oc), list)
		b, _ := json.Marshal(resp.Errors)
		op.send(c, wsMessage{Type: "error", Payload: b}, false)
		return
	}
	if oc.Operation.Operation != ast.Subscription {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	} else {
		ctx = reqctx.WithSetupDeadline(ctx, deadline)
	}
	responses, rctx := c.exec.DispatchOperation(ctx, oc)
	// end is the stream's end: a subscription that ended with an error (a
	// slow consumer, a role removed) ends with an error message naming it.
	end := func() {
		if err := endErr(); err != nil && c.ctx.Err() == nil {
			resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, oc), gqlerror.List{gqlerror.WrapPath(nil, err)})
			b, _ := json.Marshal(resp.Errors)
			op.send(c, wsMessage{Type: "error", Payload: b}, false)
		}
	}
	if oc.Operation.Operation == ast.Subscription && drv.skip != nil {
		// One step takes one item the source said is there: an event or
		// the end. An event another subscription of the same operation
		// (document, variables, principal) has rendered is taken as those
		// bytes; otherwise it is executed, and kept for the others.
		driven = true
		key := renderKeyOf(p, params)
		drv.start(func(item any) bool { return c.step(op, drv, rctx, responses, key, end, item) })
		return
	}
	for {
		resp := responses(rctx)
		if resp == nil {
			break
		}
		if !c.sendResponse(op, resp) {
			return
		}
		if oc.Operation.Operation != ast.Subscription {
			return
		}
	}
	end()
}

// step is one step of a driven subscription (see run): it takes item (an
// event, or nil for the end) and writes it, as rendered by another
// subscription of the same key or executed here. It says whether the
// subscription goes on.
func (c *wsConn) step(op *wsOp, drv *wsDriver, rctx context.Context, responses graphql.ResponseHandler, key string, end func(), item any) bool {
	b, ended, err := c.s.render(rctx, drv.skip, responses, key, item)
	if !ended && err == nil && op.send(c, wsMessage{Type: "next", Payload: b}, true) {
		return true
	}
	if ended {
		end()
	}
	op.cancel() // the source ends (if it has not) and says so once more
	c.finish(op)
	return false
}

// render takes item, one item a driven subscription's source said is
// there (an event, or nil for the end), and returns its payload: the bytes
// another subscription of the same key (document, variables, principal)
// rendered, taken with skip, or the subscription's own execution, kept for
// the others. ended says the source has ended; err is a payload that could
// not be encoded.
func (s *Server) render(rctx context.Context, skip func(), responses graphql.ResponseHandler, key string, item any) (b []byte, ended bool, err error) {
	var mine *rendering
	if item != nil {
		r, owner := s.renders.claim(item, key)
		if owner {
			mine = r
		} else if b, ok := r.wait(rctx); ok {
			skip()
			return b, false, nil
		}
	}
	resp := responses(rctx)
	if resp != nil {
		b, err = json.Marshal(resp)
	}
	if mine != nil {
		// Errors are not shared: they may be this subscription's own.
		mine.done(b, resp != nil && err == nil && len(resp.Errors) == 0)
	}
	return b, resp == nil, err
}

// wsDriver drives a subscription by its source's ready calls
// (reqctx.Driver): each call says one more item is in the channel, and a
// goroutine runs only while items are pending, taking them one at a time
// and in order.
type wsDriver struct {
	skip func() // set by the resolver on the operation's goroutine
	// ctx and log name the operation in a panic's log line; crashed ends
	// the operation after one.
	ctx     context.Context
	log     *slog.Logger
	crashed func()

	mu      sync.Mutex
	pending []any // the items signalled and not yet taken, in order
	running bool
	ended   bool
	step    func(item any) bool
}

func (d *wsDriver) Attach(skip func()) { d.skip = skip }

func (d *wsDriver) Ready() func(item any) {
	return func(item any) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.pending = append(d.pending, item)
		d.kick()
	}
}

// start begins taking items (those signalled before it included).
func (d *wsDriver) start(step func(item any) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.step = step
	d.kick()
}

// kick starts the goroutine when there is work and none runs (under d.mu).
func (d *wsDriver) kick() {
	if d.step == nil || d.running || d.ended || len(d.pending) == 0 {
		return
	}
	d.running = true
	safe.Go(d.ctx, d.log, "subscription events", d.drain, func() {
		d.mu.Lock()
		d.ended, d.running, d.pending = true, false, nil
		d.mu.Unlock()
		d.crashed()
	})
}

func (d *wsDriver) drain() {
	for {
		d.mu.Lock()
		if len(d.pending) == 0 || d.ended {
			d.pending = nil // lets the slice's array go while idle
			d.running = false
			d.mu.Unlock()
			return
		}
		item := d.pending[0]
		d.pending[0] = nil
		d.pending = d.pending[1:]
		d.mu.Unlock()
		if !d.step(item) {
			d.mu.Lock()
			d.ended, d.running, d.pending = true, false, nil
			d.mu.Unlock()
			return
		}
	}
}

// renders keeps the latest renderings of subscription items (a
// subscription's "next" payload for one event), keyed by the item and the
// operation: one event goes to every subscriber of its tenant, and the
// subscribers of one dashboard run the same document as the same principal,
// so it is executed once for them all; those that ask while it is being
// executed wait for it. An entry holds its item, so an item's identity is
// never reused while it is kept; the cache is bounded by dropping every
// entry when it is full (it serves the event in flight).
type renders struct {
	mu sync.Mutex
	m  map[renderKey]*rendering
}

type renderKey struct {
	item any
	op   string
}

// rendering is one item's payload for one operation, once it is done.
type rendering struct {
	ready chan struct{}
	// over is set with ready closed: the subscribers of an event that
	// ask once it is rendered (nearly all of 10,000) read it without
	// taking the channel's lock one after the other.
	over atomic.Bool
	b    []byte
	ok   bool // false: the renderer had nothing to share (an error, the end)
}

const maxRenders = 4096

// claim returns the item's rendering for op, and owner true when the
// caller is to render it (and then call done).
func (r *renders) claim(item any, op string) (x *rendering, owner bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := renderKey{item, op}
	if x := r.m[k]; x != nil {
		return x, false
	}
	if r.m == nil || len(r.m) >= maxRenders {
		r.m = make(map[renderKey]*rendering, 64)
	}
	x = &rendering{ready: make(chan struct{})}
	r.m[k] = x
	return x, true
}

func (x *rendering) done(b []byte, ok bool) {
	x.b, x.ok = b, ok
	x.over.Store(true)
	close(x.ready)
}

// wait returns the payload once it is rendered; ok false when there is
// none to share (the caller renders its own) or ctx ended.
func (x *rendering) wait(ctx context.Context) ([]byte, bool) {
	if x.over.Load() {
		return x.b, x.ok
	}
	select {
	case <-x.ready:
		return x.b, x.ok
	case <-ctx.Done():
		return nil, false
	}
}

// renderKeyOf names an operation for renders: what its answer to an item
// depends on (the principal, whose reads the answer holds; the document,
// operation name and variables).
func renderKeyOf(p *reqctx.Principal, params *graphql.RawParams) string {
	vars, _ := json.Marshal(params.Variables)
	return p.Kind + ":" + p.ID + "\x00" + params.OperationName + "\x00" + params.Query + "\x00" + string(vars)
}

// OnChange registers f for changes of the socket's principal's role
// bindings (reqctx.Session).
func (c *wsConn) OnChange(f func()) func() bool { return c.session.OnChange(f) }

// Principal authenticates the socket's token again (reqctx.Session).
func (c *wsConn) Principal(ctx context.Context) (*reqctx.Principal, error) {
	return auth.Authenticate(ctx, c.s.DB, c.secret)
}

func (c *wsConn) sendResponse(op *wsOp, resp *graphql.Response) bool {
	b, err := json.Marshal(resp)
	if err != nil {
		return false
	}
	return op.send(c, wsMessage{Type: "next", Payload: b}, false)
}

// send writes a message; false when the connection is closing. Writes
// happen on the caller's goroutine (the socket's reader, an operation, the
// ping timer; the connection serialises them), so a socket costs no writer
// goroutine and no queue. A client that does not take a message within
// Config.WS.WriteTimeout is a slow consumer: its socket is closed, and the
// operation that was writing ends; the hub's bounded buffer keeps the
// publisher from ever waiting on it.
func (c *wsConn) send(m wsMessage) bool {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.Config.WS.WriteTimeout)
	defer cancel()
	return c.write(ctx, m)
}

// sendEvent writes a subscription's message without a deadline of its own:
// a deadline per message costs a timer and two context registrations, a
// fifth of the server's work when an event goes to 10,000 sockets. A write
// that does not finish is still bounded: the ping timer's next write waits
// behind it for at most Config.WS.WriteTimeout, and then closes the socket, which
// ends the stuck write (and the hub ends a subscriber that takes nothing for
// its Stall).
func (c *wsConn) sendEvent(m wsMessage) bool { return c.write(context.Background(), m) }

func (c *wsConn) write(ctx context.Context, m wsMessage) bool {
	if c.ctx.Err() != nil {
		return false
	}
	// The turn to write: a timed write (ctx has a deadline) waiting behind
	// a stuck one gives up at its deadline and closes the socket, which
	// ends the stuck write.
	select {
	case c.wmu <- struct{}{}:
	default:
		select {
		case c.wmu <- struct{}{}:
		case <-ctx.Done():
			c.close(closeSlowConsumer, "the client does not read; reconnect")
			return false
		}
	}
	defer func() { <-c.wmu }()
	if c.ctx.Err() != nil {
		return false
	}
	buf := getBuffer()
	defer putBuffer(buf)
	// The message goes after room for the longest frame header.
	b, err := m.appendTo(append((*buf)[:0], make([]byte, maxFrameHeader)...))
	if err != nil {
		return false
	}
	*buf = b
	if _, deadline := ctx.Deadline(); !deadline && c.raw != nil {
		frame := frameText(b, maxFrameHeader)
		_, err = c.raw.Write(frame)
	} else {
		// Write has framed and sent the message (or failed) when it
		// returns: the buffer is free again.
		err = c.c.Write(ctx, websocket.MessageText, b[maxFrameHeader:])
	}
	if err != nil {
		c.close(closeSlowConsumer, "the client does not read; reconnect")
		return false
	}
	return true
}

// maxFrameHeader is the longest header of an unmasked frame (RFC 6455
// 5.2): two bytes and a 64-bit length.
const maxFrameHeader = 10

// frameText writes the header of a final, unmasked text frame (a server's
// frame) of b[at:] just before it, in b[:at], and returns the frame.
func frameText(b []byte, at int) []byte {
	n := len(b) - at
	var h []byte
	switch {
	case n < 126:
		h = b[at-2 : at]
		h[1] = byte(n)
	case n <= 0xffff:
		h = b[at-4 : at]
		h[1] = 126
		binary.BigEndian.PutUint16(h[2:], uint16(n))
	default:
		h = b[at-10 : at]
		h[1] = 127
		binary.BigEndian.PutUint64(h[2:], uint64(n))
	}
	h[0] = 0x81 // FIN, text
	return b[at-len(h):]
}

// wsBuffers hold messages while they are encoded and written (one event
// is written to every subscriber of it: a buffer each would be as many
// allocations).
var wsBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// getBuffer takes a buffer of wsBuffers; putBuffer gives it back once
// the write is done, unless it grew past 64 KiB (a rare large message
// keeps no memory).
func getBuffer() *[]byte { return wsBuffers.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= 64<<10 {
		wsBuffers.Put(b)
	}
}

// encode is the message's JSON.
func (m wsMessage) encode() ([]byte, error) { return m.appendTo(nil) }

// appendTo appends the message's JSON to b. The payload is JSON this
// server produced, so it is copied as it is, not parsed and compacted
// again as json.Marshal does with a RawMessage (a subscription's every
// event goes through here).
func (m wsMessage) appendTo(b []byte) ([]byte, error) {
	b = append(b, '{')
	if m.ID != "" {
		b = append(b, `"id":`...)
		if plainJSONString(m.ID) {
			b = append(append(append(b, '"'), m.ID...), '"')
		} else {
			id, err := json.Marshal(m.ID)
			if err != nil {
				return nil, err
			}
			b = append(b, id...)
		}
		b = append(b, ',')
	}
	b = append(append(append(b, `"type":"`...), m.Type...), '"')
	if len(m.Payload) > 0 {
		b = append(append(b, `,"payload":`...), m.Payload...)
	}
	return append(b, '}'), nil
}

// plainJSONString says whether json.Marshal writes s between quotes as it
// is: printable ASCII with nothing it escapes (", \, and <, >, & as HTML).
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// close ends the connection once with a close code and reason.
func (c *wsConn) close(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	sess := c.session
	c.mu.Unlock()
	c.s.sessions.remove(sess)
	c.cancelCause(closeCause(code))
	// Close waits for the peer's close frame for a while; do not hold up
	// the caller (a session sweep, a shutdown) on it. The connection counts
	// as open until it is done.
	c.s.conns.Add(1)
	safe.Go(c.ctx, c.s.Log, "websocket close", func() {
		defer c.s.conns.Done()
		// A revoked credential's socket ends within revokeGrace, whatever
		// its client reads: the message being written, the close frame and
		// the client's answer get that long, then the connection is reset.
		if code == closeForbidden && c.raw != nil {
			reset := time.AfterFunc(revokeGrace, safe.Func(c.ctx, c.s.Log, "websocket reset", func() { resetConn(c.raw) }))
			defer reset.Stop()
		}
		// After the message being written, if it finishes in time: the
		// close frame is the socket's last. A slow consumer's stuck write
		// is ended at once (its client reads nothing anyway); the close
		// frame then has coder/websocket's own time.
		slow := code == closeSlowConsumer && c.raw != nil
		if slow {
			_ = c.raw.SetWriteDeadline(time.Now())
		}
		t := time.NewTimer(c.s.Config.WS.WriteTimeout)
		select {
		case c.wmu <- struct{}{}:
			defer func() { <-c.wmu }()
		case <-t.C:
		}
		t.Stop()
		if slow {
			_ = c.raw.SetWriteDeadline(time.Time{})
		}
		_ = c.c.Close(code, truncate(reason, 120))
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // whole characters: a close reason must be UTF-8
	}
	return s[:n]
}
