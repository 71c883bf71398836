package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/rest"
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

	wsWriteTimeout = 10 * time.Second
	// wsMaxOperations bounds the operations running at once on one socket
	// (a dashboard needs a handful); past it a subscribe gets an error
	// message and the socket stays open.
	wsMaxOperations = 64
)

// WSTimings are the protocol's timers.
type WSTimings struct {
	InitTimeout  time.Duration // connection_init must arrive within it
	PingInterval time.Duration // the server pings an idle client
}

func (s *Server) websocket() graphql.Transport { return wsTransport{s: s} }

type wsTransport struct{ s *Server }

func (wsTransport) Supports(r *http.Request) bool { return r.Header.Get("Upgrade") != "" }

func (t wsTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:   []string{wsProtocol},
		OriginPatterns: t.s.Config.AllowedOrigins,
	})
	if err != nil {
		return // Accept has answered the request
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
	ctx, cancel := context.WithCancel(reqctx.Detach(r.Context()))
	conn := &wsConn{
		s: t.s, c: c, exec: exec, ctx: ctx, cancel: cancel,
		ops: map[string]context.CancelFunc{},
		ip:  clientIP(r),
	}
	t.s.conns.Add(1)
	go func() {
		defer t.s.conns.Done()
		conn.serve()
	}()
}

// wsMessage is one protocol message.
type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type wsConn struct {
	s      *Server
	c      *websocket.Conn
	exec   graphql.GraphExecutor
	ctx    context.Context
	cancel context.CancelFunc
	ip     string

	mu       sync.Mutex
	ops      map[string]context.CancelFunc
	initSeen bool
	acked    bool
	secret   string // the bearer token, to authenticate each operation again
	session  *session
	closed   bool
}

func (c *wsConn) serve() {
	defer c.cancel()
	timings := c.s.Config.WS
	init := time.AfterFunc(timings.InitTimeout, func() {
		c.mu.Lock()
		acked := c.acked
		c.mu.Unlock()
		if !acked {
			c.close(closeInitTimeout, "Connection initialisation timeout")
		}
	})
	defer init.Stop()
	if timings.PingInterval > 0 {
		// A timer, not a goroutine per socket: it pings, then sets itself
		// again while the socket is open.
		var ping *time.Timer
		ping = time.AfterFunc(timings.PingInterval, func() {
			if c.send(wsMessage{Type: "ping"}) {
				ping.Reset(timings.PingInterval)
			}
		})
		defer ping.Stop()
	}
	for {
		// Never a cancellable context: coder/websocket drops the connection
		// without a close frame when a read's context ends.
		typ, data, err := c.c.Read(context.Background())
		if err != nil {
			c.close(websocket.StatusNormalClosure, "")
			return
		}
		if typ != websocket.MessageText {
			c.close(closeBadRequest, "Invalid message received: messages are JSON text")
			return
		}
		if !c.handle(data) {
			return
		}
	}
}

// handle processes one message; false ends the connection.
func (c *wsConn) handle(data []byte) bool {
	var m wsMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil || m.Type == "" || dec.More() {
		c.close(closeBadRequest, "Invalid message received")
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
		c.mu.Lock()
		stop := c.ops[m.ID]
		c.mu.Unlock()
		if stop != nil {
			stop()
		}
	default:
		c.close(closeBadRequest, "Invalid message received: unknown type "+truncate(m.Type, 32))
		return false
	}
	return true
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
	if c.s.authFailLimited(c.ip) {
		c.close(closeForbidden, "Forbidden: too many failed authentications; retry later")
		return false
	}
	pr, err := auth.Authenticate(c.ctx, c.s.DB, tok)
	if err != nil {
		if errs.CodeOf(err) == errs.Unauthenticated {
			c.s.authFailed(c.ip)
			c.close(closeForbidden, "Forbidden: unknown or revoked bearer token")
		} else {
			c.close(closeInternal, "the database is unavailable; retry")
		}
		return false
	}
	c.mu.Lock()
	c.secret, c.acked = tok, true
	c.mu.Unlock()
	c.session = c.s.sessions.add(pr, c.close)
	c.send(wsMessage{Type: "connection_ack"})
	return true
}

func (c *wsConn) subscribe(m wsMessage) bool {
	c.mu.Lock()
	acked := c.acked
	c.mu.Unlock()
	if !acked {
		c.close(closeUnauthorized, "Unauthorized")
		return false
	}
	if m.ID == "" || len(m.ID) > 128 {
		c.close(closeBadRequest, "Invalid message received: subscribe needs an id")
		return false
	}
	params, perr := DecodeParams(m.Payload)
	if perr != nil {
		c.close(closeBadRequest, "Invalid message received: "+perr.Message)
		return false
	}
	c.mu.Lock()
	if _, dup := c.ops[m.ID]; dup {
		c.mu.Unlock()
		c.close(closeDuplicateID, "Subscriber for "+truncate(m.ID, 64)+" already exists")
		return false
	}
	if len(c.ops) >= wsMaxOperations {
		c.mu.Unlock()
		b, _ := json.Marshal(gqlerror.List{{Message: fmt.Sprintf("too many operations on this socket (at most %d at once); complete one first", wsMaxOperations),
			Extensions: map[string]any{"code": string(errs.RateLimited), "details": map[string]any{"reason": "operations", "limit": wsMaxOperations}}}})
		c.send(wsMessage{ID: m.ID, Type: "error", Payload: b})
		return true
	}
	ctx, stop := context.WithCancel(c.ctx)
	c.ops[m.ID] = stop
	c.mu.Unlock()
	go c.run(ctx, stop, m.ID, params)
	return true
}

// run executes one operation. The credential is authenticated again, so a
// revoked token or a removed role takes effect on the next operation. A
// subscription whose resolver accepts the socket's driver (instanceEvents
// does) is then driven by its events: run returns, and a goroutine exists
// for it only while it has an event to execute and write.
func (c *wsConn) run(ctx context.Context, stop context.CancelFunc, id string, params *graphql.RawParams) {
	completed, driven := false, false
	finish := func() {
		c.mu.Lock()
		delete(c.ops, id)
		c.mu.Unlock()
		stop()
		if !completed && c.ctx.Err() == nil {
			c.send(wsMessage{ID: id, Type: "complete"})
		}
	}
	defer func() {
		if !driven {
			finish()
		}
	}()
	ctx = reqctx.WithRequestID(ctx, newRequestID())
	ctx = graphql.StartOperationTrace(ctx)
	fail := func(e *errs.Error) {
		b, _ := json.Marshal(gqlerror.List{{Message: e.Message, Extensions: map[string]any{"code": string(e.Code), "details": e.Details}}})
		c.send(wsMessage{ID: id, Type: "error", Payload: b})
		completed = true
	}
	p, err := auth.Authenticate(ctx, c.s.DB, c.secret)
	if err != nil {
		if errs.CodeOf(err) == errs.Unauthenticated {
			c.close(closeForbidden, "Forbidden: the bearer token was revoked")
			return
		}
		fail(rest.PublicError(ctx, c.s.Log, err, "transport", "websocket", "step", "authentication"))
		return
	}
	ctx = reqctx.WithPrincipal(ctx, p)
	ctx = reqctx.WithSession(ctx, c)
	ctx, endErr := reqctx.WithEnd(ctx)
	drv := &wsDriver{}
	ctx = reqctx.WithDriver(ctx, drv)
	oc, list := c.exec.CreateOperationContext(ctx, params)
	if list != nil {
		resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, oc), list)
		b, _ := json.Marshal(resp.Errors)
		c.send(wsMessage{ID: id, Type: "error", Payload: b})
		completed = true
		return
	}
	if oc.Operation.Operation != ast.Subscription {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.s.Config.RequestTimeout)
		defer cancel()
	}
	responses, rctx := c.exec.DispatchOperation(ctx, oc)
	// end is the stream's end: a subscription that ended with an error (a
	// slow consumer, a role removed) ends with an error message naming it.
	end := func() {
		if err := endErr(); err != nil && c.ctx.Err() == nil {
			resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, oc), gqlerror.List{gqlerror.WrapPath(nil, err)})
			b, _ := json.Marshal(resp.Errors)
			c.send(wsMessage{ID: id, Type: "error", Payload: b})
			completed = true
		}
	}
	if oc.Operation.Operation == ast.Subscription && drv.skip != nil {
		// One step takes one item the source said is there: an event or
		// the end. An event another subscription of the same operation
		// (document, variables, principal) has rendered is taken as those
		// bytes; otherwise it is executed, and kept for the others.
		driven = true
		key := renderKeyOf(p, params)
		drv.start(func(item any) bool {
			var mine *rendering
			if item != nil {
				r, owner := c.s.renders.claim(item, key)
				if owner {
					mine = r
				} else if b, ok := r.wait(rctx); ok {
					drv.skip()
					return c.sendEvent(wsMessage{ID: id, Type: "next", Payload: b})
				}
			}
			resp := responses(rctx)
			var b []byte
			var err error
			if resp != nil {
				b, err = json.Marshal(resp)
			}
			if mine != nil {
				// Errors are not shared: they may be this subscription's own.
				mine.done(b, resp != nil && err == nil && len(resp.Errors) == 0)
			}
			if resp != nil && err == nil && c.sendEvent(wsMessage{ID: id, Type: "next", Payload: b}) {
				return true
			}
			if resp == nil {
				end()
			}
			stop() // the source ends (if it has not) and says so once more
			finish()
			return false
		})
		return
	}
	for {
		resp := responses(rctx)
		if resp == nil {
			break
		}
		if !c.sendResponse(id, resp) {
			return
		}
		if oc.Operation.Operation != ast.Subscription {
			return
		}
	}
	end()
}

// wsDriver drives a subscription by its source's ready calls
// (reqctx.Driver): each call says one more item is in the channel, and a
// goroutine runs only while items are pending, taking them one at a time
// and in order.
type wsDriver struct {
	skip func() // set by the resolver on the operation's goroutine

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
	go d.drain()
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
	b     []byte
	ok    bool // false: the renderer had nothing to share (an error, the end)
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
	close(x.ready)
}

// wait returns the payload once it is rendered; ok false when there is
// none to share (the caller renders its own) or ctx ended.
func (x *rendering) wait(ctx context.Context) ([]byte, bool) {
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

func (c *wsConn) sendResponse(id string, resp *graphql.Response) bool {
	b, err := json.Marshal(resp)
	if err != nil {
		return false
	}
	return c.send(wsMessage{ID: id, Type: "next", Payload: b})
}

// send writes a message; false when the connection is closing. Writes
// happen on the caller's goroutine (the socket's reader, an operation, the
// ping timer; the connection serialises them), so a socket costs no writer
// goroutine and no queue. A client that does not take a message within
// wsWriteTimeout is a slow consumer: its socket is closed, and the
// operation that was writing ends; the hub's bounded buffer keeps the
// publisher from ever waiting on it.
func (c *wsConn) send(m wsMessage) bool {
	ctx, cancel := context.WithTimeout(context.Background(), wsWriteTimeout)
	defer cancel()
	return c.write(ctx, m)
}

// sendEvent writes a subscription's message without a deadline of its own:
// a deadline per message costs a timer and two context registrations, a
// fifth of the server's work when an event goes to 10,000 sockets. A write
// that does not finish is still bounded: the ping timer's next write waits
// behind it for at most wsWriteTimeout, and then closes the socket, which
// ends the stuck write (and the hub ends a subscriber that takes nothing for
// its Stall).
func (c *wsConn) sendEvent(m wsMessage) bool { return c.write(context.Background(), m) }

func (c *wsConn) write(ctx context.Context, m wsMessage) bool {
	if c.ctx.Err() != nil {
		return false
	}
	b, err := m.encode()
	if err != nil {
		return false
	}
	if err := c.c.Write(ctx, websocket.MessageText, b); err != nil {
		c.close(closeSlowConsumer, "the client does not read; reconnect")
		return false
	}
	return true
}

// encode is the message's JSON. The payload is JSON this server produced,
// so it is copied as it is, not parsed and compacted again as
// json.Marshal does with a RawMessage (a subscription's every event goes
// through here).
func (m wsMessage) encode() ([]byte, error) {
	id, err := json.Marshal(m.ID)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(m.Payload)+len(id)+len(m.Type)+32)
	b = append(b, '{')
	if m.ID != "" {
		b = append(append(append(b, `"id":`...), id...), ',')
	}
	b = append(append(append(b, `"type":"`...), m.Type...), '"')
	if len(m.Payload) > 0 {
		b = append(append(append(b, `,"payload":`...), m.Payload...), '}')
		return b, nil
	}
	return append(b, '}'), nil
}

// close ends the connection once with a close code and reason.
func (c *wsConn) close(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	c.s.sessions.remove(c.session)
	c.cancel()
	// Close waits for the peer's close frame for a while; do not hold up
	// the caller (a session sweep, a shutdown) on it. The connection counts
	// as open until it is done.
	c.s.conns.Add(1)
	go func() {
		defer c.s.conns.Done()
		_ = c.c.Close(code, truncate(reason, 120))
	}()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
