package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/safe"
)

// sessions are the long-lived connections (WebSockets, event streams) of
// this replica. A sweep checks all their credentials in one statement every
// Config.AuthRecheck: a revoked token's connections are closed, and a
// principal whose role bindings changed has its sessions told, so that
// running subscriptions decide again. Operations authenticate on their own
// as well; the sweep covers what runs between them.
//
// A revocation or a change of a role binding does not wait for the next
// sweep: once it commits (store.NoteAuthority), its replica sweeps at once
// and tells the others on sessionsChannel, after the commit and outside
// any transaction; they sweep at once too. The periodic sweep stays for a
// replica that stopped between the commit and its notification, or a
// LISTEN connection that was down.
type sessions struct {
	s       *Server
	mu      sync.Mutex
	m       map[*session]struct{}
	perCred map[string]int // open sessions per credential (token id)
	running bool
	// sockets is every WebSocket from its upgrade to its end, with a
	// session or still without (before connection_init): a shutdown
	// closes them all.
	sockets map[*wsConn]struct{}
	// closing is set by closeAll (a shutdown) with its code and reason:
	// a socket or session that begins after it is closed at once.
	closing     bool
	closeCode   websocket.StatusCode
	closeReason string

	id   string        // names this replica's notifications, which it skips
	now  chan struct{} // sweep now
	tell chan struct{} // tell the other replicas to sweep now
}

// closeCause is the error a session's operations still running end with
// when the session is closed with code: a revoked token's are
// UNAUTHENTICATED, as the session's end says, not the UNAVAILABLE of a
// request cancelled (store.ClassifyIn reads it); a shutdown's UNAVAILABLE
// with reason "shutdown"; nil for any other close.
func closeCause(code websocket.StatusCode) error {
	switch code {
	case closeForbidden:
		return errs.E(errs.Unauthenticated, "the bearer token was revoked")
	case closeServiceReboot:
		// A shutdown's: what it cancelled says so, as the stream's end
		// does (retry on another replica).
		return errs.E(errs.Unavailable, "%s", shutdownReason).With("reason", "shutdown")
	}
	return nil
}

// shutdownReason is a shutdown's close reason, and its operations' error.
const shutdownReason = "the server is restarting; reconnect"

// sessionsChannel is where a replica tells the others that a credential
// was revoked or a role binding changed (the payload: its sessions' id).
const sessionsChannel = "compute_sessions"

// sweepGap is the least time between two sweeps that a change asked for:
// a burst of revocations is a sweep per sweepGap on each replica.
const sweepGap = 250 * time.Millisecond

func (ss *sessions) init(s *Server) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ss.s, ss.id = s, hex.EncodeToString(b[:])
	ss.now, ss.tell = make(chan struct{}, 1), make(chan struct{}, 1)
}

// changed is told, after the commit, that this replica revoked a
// credential or changed a role binding.
func (ss *sessions) changed() {
	ss.sweepNow()
	select {
	case ss.tell <- struct{}{}:
	default:
	}
}

// heard is another replica's notification ("" when the LISTEN connection
// was (re)established, and may have missed one).
func (ss *sessions) heard(payload string) {
	if payload != ss.id {
		ss.sweepNow()
	}
}

func (ss *sessions) sweepNow() {
	select {
	case ss.now <- struct{}{}:
	default:
	}
}

// telling sends the notifications changed asks for, one per sweepGap at
// most, until ctx ends.
func (ss *sessions) telling(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ss.tell:
		}
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := ss.s.DB.ExecContext(nctx, `SELECT pg_notify($1, $2)`, sessionsChannel, ss.id); err != nil && ctx.Err() == nil {
			ss.s.Log.Warn("telling the replicas to check their sockets failed", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(sweepGap):
		}
	}
}

// errTooMany is the refusal of a session past Config.SessionsPerCredential.
func (ss *sessions) errTooMany() *errs.Error {
	return errs.E(errs.RateLimited, "this credential holds %d WebSockets and event streams open on this server, the most it may; close one first",
		ss.s.Config.SessionsPerCredential).With("reason", "sessions").With("limit", ss.s.Config.SessionsPerCredential)
}

type session struct {
	tokenID string
	close   func(code websocket.StatusCode, reason string)

	mu       sync.Mutex
	roles    string
	known    bool
	nextID   int
	onChange map[int]func()
}

// OnChange registers f, called when the principal's role bindings change
// (and at the first sweep after the session began): the session's running
// subscriptions decide again. No goroutine waits for it.
func (x *session) OnChange(f func()) func() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.onChange == nil {
		x.onChange = map[int]func(){}
	}
	id := x.nextID
	x.nextID++
	x.onChange[id] = f
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		_, ok := x.onChange[id]
		delete(x.onChange, id)
		return ok
	}
}

func (x *session) observe(roles string) {
	x.mu.Lock()
	if x.known && roles == x.roles {
		x.mu.Unlock()
		return
	}
	x.roles, x.known = roles, true
	fs := make([]func(), 0, len(x.onChange))
	for _, f := range x.onChange {
		fs = append(fs, f)
	}
	x.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// track registers a WebSocket from its upgrade until untrack; once the
// server is closing, it is closed at once instead, as closeAll closed the
// others.
func (ss *sessions) track(c *wsConn) {
	ss.mu.Lock()
	closing, code, reason := ss.closing, ss.closeCode, ss.closeReason
	if !closing {
		if ss.sockets == nil {
			ss.sockets = map[*wsConn]struct{}{}
		}
		ss.sockets[c] = struct{}{}
	}
	ss.mu.Unlock()
	if closing {
		c.close(code, reason)
	}
}

func (ss *sessions) untrack(c *wsConn) {
	ss.mu.Lock()
	delete(ss.sockets, c)
	ss.mu.Unlock()
}

// isClosing says whether closeAll has begun (the server is shutting down).
func (ss *sessions) isClosing() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.closing
}

// add opens a session of the principal's credential, or returns nil when
// the credential holds Config.SessionsPerCredential already. Once the
// server is closing, the session is closed as soon as it is open.
func (ss *sessions) add(p *reqctx.Principal, closeFn func(websocket.StatusCode, string)) *session {
	x := &session{tokenID: p.TokenID, close: closeFn}
	ss.mu.Lock()
	closing, code, reason := ss.closing, ss.closeCode, ss.closeReason
	defer func() {
		ss.mu.Unlock()
		if closing {
			closeFn(code, reason)
		}
	}()
	if ss.m == nil {
		ss.m, ss.perCred = map[*session]struct{}{}, map[string]int{}
	}
	if ss.perCred[x.tokenID] >= ss.s.Config.SessionsPerCredential {
		closing = false // refused: the caller answers why
		return nil
	}
	ss.perCred[x.tokenID]++
	ss.m[x] = struct{}{}
	if !ss.running {
		ss.running = true
		// After a panic (logged by safe) the next session starts a sweep.
		safe.Go(context.Background(), ss.s.Log, "session sweep", ss.sweep, func() {
			ss.mu.Lock()
			ss.running = false
			ss.mu.Unlock()
		})
	}
	return x
}

func (ss *sessions) remove(x *session) {
	if x == nil {
		return
	}
	ss.mu.Lock()
	if _, ok := ss.m[x]; ok {
		delete(ss.m, x)
		if ss.perCred[x.tokenID]--; ss.perCred[x.tokenID] <= 0 {
			delete(ss.perCred, x.tokenID)
		}
	}
	ss.mu.Unlock()
}

// count is the number of open sessions.
func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}

// closeAll closes every session and every WebSocket, with a session or
// not yet (graceful shutdown: clients reconnect to another replica); those
// that begin after it are closed as they begin.
func (ss *sessions) closeAll(code websocket.StatusCode, reason string) {
	ss.mu.Lock()
	ss.closing, ss.closeCode, ss.closeReason = true, code, reason
	list := make([]*session, 0, len(ss.m))
	for x := range ss.m {
		list = append(list, x)
	}
	sockets := make([]*wsConn, 0, len(ss.sockets))
	for c := range ss.sockets {
		sockets = append(sockets, c)
	}
	ss.mu.Unlock()
	for _, x := range list {
		x.close(code, reason)
	}
	for _, c := range sockets {
		c.close(code, reason)
	}
}

// sweep runs while sessions exist: every Config.AuthRecheck, and at once
// when a change asks for it (no sooner than sweepGap after the last).
func (ss *sessions) sweep() {
	every := ss.s.Config.AuthRecheck
	var last time.Time
	for {
		t := time.NewTimer(every)
		select {
		case <-t.C:
		case <-ss.now:
			t.Stop()
			if d := sweepGap - time.Since(last); d > 0 {
				time.Sleep(d)
			}
		}
		last = time.Now()
		ss.mu.Lock()
		if len(ss.m) == 0 {
			ss.running = false
			ss.mu.Unlock()
			return
		}
		byToken := map[string][]*session{}
		for x := range ss.m {
			byToken[x.tokenID] = append(byToken[x.tokenID], x)
		}
		ss.mu.Unlock()
		ids := make([]string, 0, len(byToken))
		for id := range byToken {
			ids = append(ids, id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), every+5*time.Second)
		var rows []struct {
			TokenID string `db:"token_id"`
			Roles   string `db:"roles"`
		}
		err := ss.s.DB.SelectContext(ctx, &rows, `
			SELECT t.token_id,
			       coalesce((SELECT string_agg(b.tenant_id || '=' || b.role, ',' ORDER BY b.tenant_id)
			                 FROM role_bindings b WHERE b.principal_id = t.principal_id), '') AS roles
			FROM tokens t WHERE t.token_id = ANY($1) AND t.revoked_at IS NULL`, ids)
		cancel()
		if err != nil {
			ss.s.Log.Warn("session sweep failed", "err", err)
			continue
		}
		live := make(map[string]string, len(rows))
		for _, r := range rows {
			live[r.TokenID] = r.Roles
		}
		for id, list := range byToken {
			roles, ok := live[id]
			for _, x := range list {
				if !ok {
					x.close(closeForbidden, "Forbidden: the bearer token was revoked")
					continue
				}
				x.observe(roles)
			}
		}
	}
}

// Sessions is the number of open WebSockets and event streams.
func (s *Server) Sessions() int { return s.sessions.count() }
