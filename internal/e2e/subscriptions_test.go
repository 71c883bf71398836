package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

const eventsSub = `subscription($t: String!, $i: String, $p: String, $a: String) {
  instanceEvents(tenantId: $t, instanceId: $i, poolId: $p, after: $a) { eventId type instanceId tenantId poolId state desiredState }
}`

// waitSubscribers waits until the server's event hub counts n live
// subscriptions: from then on, an event committed reaches them.
func waitSubscribers(t testing.TB, e *testkit.Env, n int64) {
	t.Helper()
	wait.Eventually(t, 10*time.Second, func() error {
		if got := e.Srv.Live.Subscribers(); got != n {
			return fmt.Errorf("%d subscriptions live, want %d", got, n)
		}
		return nil
	})
}

// subscribe starts instanceEvents on a socket under id.
func (w *wsClient) subscribe(id string, vars map[string]any) {
	w.t.Helper()
	w.send(map[string]any{"id": id, "type": "subscribe", "payload": map[string]any{"query": eventsSub, "variables": vars}})
}

// events reads n events of subscription id (failing on anything else).
func (w *wsClient) events(id string, n int) []map[string]any {
	w.t.Helper()
	var out []map[string]any
	for len(out) < n {
		m := w.next()
		if m["id"] != id || m["type"] != "next" {
			w.t.Fatalf("want event %d of %d of %s, got %v", len(out)+1, n, id, m)
		}
		p := m["payload"].(map[string]any)
		if p["errors"] != nil {
			w.t.Fatalf("subscription error: %v", p)
		}
		out = append(out, p["data"].(map[string]any)["instanceEvents"].(map[string]any))
	}
	return out
}

func typesOf(evs []map[string]any) string {
	var s []string
	for _, ev := range evs {
		s = append(s, str(ev["type"]))
	}
	return strings.Join(s, ",")
}

// A subscription sees an instance's lifecycle as the calls are made, in
// order; resuming from a cursor replays exactly what followed it; filters
// and tenants are kept apart.
func TestInstanceEventsSubscription(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)

	all := dialWS(t, e)
	all.init(acme.Viewer.Token)
	all.subscribe("all", map[string]any{"t": "acme"})
	other := dialWS(t, e)
	other.init(beta.Viewer.Token)
	other.subscribe("beta", map[string]any{"t": "beta"})
	waitSubscribers(t, e, 2)

	id := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "web", 1))).Str("instanceId")
	got := all.events("all", 3)
	if typesOf(got) != "INSTANCE_CREATED,INSTANCE_PROVISIONING,INSTANCE_RUNNING" {
		t.Fatalf("create: %s", typesOf(got))
	}
	for _, ev := range got {
		if ev["instanceId"] != id || ev["tenantId"] != "acme" || ev["poolId"] != pool || !eventIDRe.MatchString(str(ev["eventId"])) {
			t.Fatalf("event: %v", ev)
		}
	}
	must(t, e.Call(acme.Member.Token, "instances/stop", map[string]any{"tenantId": "acme", "instanceId": id}))
	got = append(got, all.events("all", 2)...)
	if typesOf(got[3:]) != "INSTANCE_STOPPING,INSTANCE_STOPPED" {
		t.Fatalf("stop: %s", typesOf(got[3:]))
	}
	for i := 1; i < len(got); i++ {
		if str(got[i-1]["eventId"]) >= str(got[i]["eventId"]) {
			t.Fatalf("events out of order: %v", got)
		}
	}
	// Resume after the second event: exactly the three that followed, then live.
	resumed := dialWS(t, e)
	resumed.init(acme.Viewer.Token)
	resumed.subscribe("r", map[string]any{"t": "acme", "a": got[1]["eventId"]})
	re := resumed.events("r", 3)
	for i, ev := range re {
		if ev["eventId"] != got[i+2]["eventId"] {
			t.Fatalf("resumed event %d: %v, want %v", i, ev, got[i+2])
		}
	}
	// Filters: one instance, one pool; a second instance in another pool.
	pool2 := vpsPool(t, e, acme.Admin.Token, "acme", "vps2", nil)
	all.subscribe("one", map[string]any{"t": "acme", "i": id})
	all.subscribe("pool2", map[string]any{"t": "acme", "p": pool2})
	waitSubscribers(t, e, 5) // all, beta, r, one, pool2
	id2 := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool2, "db", 1))).Str("instanceId")
	waitState(t, e, acme.Member.Token, "acme", id2, "running", 10*time.Second)
	must(t, e.Call(acme.Member.Token, "instances/start", map[string]any{"tenantId": "acme", "instanceId": id}))
	waitState(t, e, acme.Member.Token, "acme", id, "running", 10*time.Second)
	byID := map[string][]map[string]any{}
	for len(byID["all"]) < 5 || len(byID["one"]) < 2 || len(byID["pool2"]) < 3 {
		m := all.next()
		p := m["payload"].(map[string]any)
		byID[str(m["id"])] = append(byID[str(m["id"])], p["data"].(map[string]any)["instanceEvents"].(map[string]any))
	}
	for _, ev := range byID["one"] {
		if ev["instanceId"] != id {
			t.Fatalf("the instance filter let through %v", ev)
		}
	}
	for _, ev := range byID["pool2"] {
		if ev["poolId"] != pool2 {
			t.Fatalf("the pool filter let through %v", ev)
		}
	}
	// beta saw nothing of acme's.
	if m, err := other.read(200 * time.Millisecond); err == nil {
		t.Fatalf("another tenant's subscriber got %v", m)
	}
	// Refusals at subscribe time.
	w := dialWS(t, e)
	w.init(beta.Admin.Token)
	for _, c := range []struct {
		vars map[string]any
		code string
	}{
		{map[string]any{"t": "acme"}, "PERMISSION_DENIED"},
		{map[string]any{"t": "acme", "a": "garbage"}, "PERMISSION_DENIED"}, // decided before the cursor is read, as instances.events
		{map[string]any{"t": "beta", "i": id}, "NOT_FOUND"},
		{map[string]any{"t": "beta", "p": pool}, "NOT_FOUND"},
		{map[string]any{"t": "beta", "a": "evt_nope"}, "INVALID_INPUT"},
		{map[string]any{"t": "no spaces"}, "INVALID_INPUT"},
	} {
		if code := opError(w.op(fmt.Sprint(c.vars), eventsSub, c.vars)); code != c.code {
			t.Fatalf("%v: %s, want %s", c.vars, code, c.code)
		}
	}
	// The operator may name any tenant; one that does not exist is
	// NOT_FOUND, not a stream that stays silent.
	op := dialWS(t, e)
	op.init(e.Operator)
	if code := opError(op.op("ghost", eventsSub, map[string]any{"t": "ghost"})); code != "NOT_FOUND" {
		t.Fatalf("the operator on a tenant that does not exist: %s", code)
	}
	// Another tenant's cursor names no place in this tenant's stream (and
	// says nothing of how many events the other tenant has).
	if code := opError(w.op("theirs", eventsSub, map[string]any{"t": "beta", "a": got[0]["eventId"]})); code != "INVALID_INPUT" {
		t.Fatalf("another tenant's cursor: %s", code)
	}
	// A cursor older than the retention, and one of the outbox before the
	// per-tenant streams.
	must(t, e.Call(acme.Member.Token, "instances/delete", map[string]any{"tenantId": "acme", "instanceId": id2}))
	if _, err := e.DB.ExecContext(context.Background(), `UPDATE event_streams s SET pruned_seq = `+events.LastSeq+` WHERE s.tenant_id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	mine := dialWS(t, e)
	mine.init(acme.Member.Token)
	for _, cursor := range []any{got[0]["eventId"], "evt_00000000000h3k00000000004x"} {
		msgs := mine.op("old", eventsSub, map[string]any{"t": "acme", "a": cursor})
		if opError(msgs) != "INVALID_STATE" || !strings.Contains(fmt.Sprint(msgs), "expired-cursor") {
			t.Fatalf("expired cursor %v: %v", cursor, msgs)
		}
	}
}

// The decision is not cached for the life of the socket: a removed role
// ends the subscription with PERMISSION_DENIED, a revoked token closes the
// socket, both within the sweep.
func TestSubscriptionsEndWhenAccessEnds(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{AuthRecheck: 300 * time.Millisecond}})
	acme := newTenant(t, e, "acme")
	watcher := newToken(t, e, acme.Admin.Token, "acme", "watcher", "viewer")
	w := dialWS(t, e)
	w.init(watcher.Token)
	w.subscribe("s", map[string]any{"t": "acme"})
	waitSubscribers(t, e, 1)
	must(t, e.Call(acme.Admin.Token, "members/revoke", map[string]any{"tenantId": "acme", "principalId": watcher.PrincipalID}))
	m := w.next()
	if m["type"] != "error" || m["id"] != "s" || opError([]map[string]any{m}) != "PERMISSION_DENIED" {
		t.Fatalf("after the role was removed: %v", m)
	}
	// Another token on another socket: revoked, the socket closes.
	v := dialWS(t, e)
	v.init(acme.Viewer.Token)
	v.subscribe("s", map[string]any{"t": "acme"})
	waitSubscribers(t, e, 1) // w's ended with its PERMISSION_DENIED
	must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": acme.Viewer.TokenID}))
	if code, _ := v.closed(5 * time.Second); code != 4403 {
		t.Fatalf("revoked token: close %d", code)
	}
	// A duplicate operation id is 4409, while the first is live.
	d := dialWS(t, e)
	d.init(acme.Admin.Token)
	d.subscribe("dup", map[string]any{"t": "acme"})
	d.subscribe("dup", map[string]any{"t": "acme"})
	if code, _ := d.closed(5 * time.Second); code != 4409 {
		t.Fatalf("duplicate id: close %d", code)
	}
	// And with the real graphql-ws client.
	out, err := node(t, clientsDir(t), "ws-close.mjs", "ws"+strings.TrimPrefix(e.Server.URL, "http")+"/graphql", "dupid", acme.Admin.Token,
		`subscription { instanceEvents(tenantId: "acme") { eventId } }`)
	if err != nil || !strings.Contains(out, `"code":4409`) {
		t.Fatalf("graphql-ws duplicate id: %v %s", err, out)
	}
}

// A revocation and a removed role reach the sockets they concern at once,
// on the replica that made them and on the others: with the periodic sweep
// an hour away, only that can close them. A revoked token's sockets stayed
// open until the next sweep (2 s by default; a probe measured 1.7 s).
func TestRevocationsReachEveryReplicasSocketsAtOnce(t *testing.T) {
	t.Parallel()
	hour := testkit.Options{Config: server.Config{AuthRecheck: time.Hour}}
	a := testkit.StartWith(t, hour)
	hour.DatabaseURL = a.DB.URL
	b := testkit.StartWith(t, hour)
	acme := newTenant(t, a, "acme")
	for _, c := range []struct {
		name string
		on   *testkit.Env // the replica whose sockets the change concerns
	}{{"the same replica", a}, {"another replica", b}} {
		t.Run(c.name, func(t *testing.T) {
			watcher := newToken(t, a, acme.Admin.Token, "acme", "watcher", "viewer")
			revoked := newToken(t, a, acme.Admin.Token, "acme", "revoked", "viewer")
			w := dialWS(t, c.on)
			w.init(watcher.Token)
			w.subscribe("s", map[string]any{"t": "acme"})
			v := dialWS(t, c.on)
			v.init(revoked.Token)
			v.subscribe("s", map[string]any{"t": "acme"})
			sse := openSSE(t, c.on, revoked.Token, eventsSub, map[string]any{"t": "acme"})
			waitSubscribers(t, c.on, 3)
			// The watcher's role goes (on replica a): its subscription ends.
			must(t, a.Call(acme.Admin.Token, "members/revoke", map[string]any{"tenantId": "acme", "principalId": watcher.PrincipalID}))
			if m := w.next(); m["type"] != "error" || m["id"] != "s" || opError([]map[string]any{m}) != "PERMISSION_DENIED" {
				t.Fatalf("after the role was removed: %v", m)
			}
			// The other token is revoked: its socket closes, its stream ends.
			must(t, a.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": revoked.TokenID}))
			if code, _ := v.closed(10 * time.Second); code != 4403 {
				t.Fatalf("revoked token's socket: close %d, want 4403", code)
			}
			var rest []byte
			var err error
			read := make(chan struct{})
			go func() { defer close(read); rest, err = io.ReadAll(sse.br) }()
			select {
			case <-read:
			case <-time.After(10 * time.Second):
				sse.res.Body.Close()
				<-read
				t.Fatalf("revoked token's event stream still open: %q", rest)
			}
			if err != nil || !strings.Contains(string(rest), "UNAUTHENTICATED") || !strings.HasSuffix(string(rest), "event: complete\ndata: \n\n") {
				t.Fatalf("revoked token's event stream: %q %v", rest, err)
			}
			waitSubscribers(t, c.on, 0)
		})
	}
}

// A mutation still running on a stream when its token is revoked (here
// waiting on a row another session holds) ends with the session's reason,
// UNAUTHENTICATED, not with the UNAVAILABLE of a cancelled request, which
// tells a client to retry (a probe saw UNAVAILABLE, then UNAUTHENTICATED).
func TestOperationsOfARevokedSessionEndUnauthenticated(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	ops := newToken(t, e, acme.Admin.Token, "acme", "ops", "admin")
	pr := must(t, e.Call(acme.Admin.Token, "projects/create", map[string]any{"tenantId": "acme", "name": "web"})).Str("projectId")
	release := holdProject(t, e, pr)
	const update = `mutation($p: String!) { updateProject(input: {tenantId: "acme", projectId: $p, description: "x"}) { project { rowVersion } } }`
	blocked := func() error {
		var n int
		if err := e.DB.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
			AND query LIKE 'SELECT 1 FROM projects WHERE%FOR UPDATE'`); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("the mutation is not waiting on the row yet")
		}
		return nil
	}
	// Over SSE: the stream's answer to the mutation, then its end. The
	// mutation's answer races the stream's end (about half the time it is
	// written first: two results, before), so a few rounds.
	for round := 0; round < 6; round++ {
		ops := ops
		if round > 0 {
			ops = newToken(t, e, acme.Admin.Token, "acme", fmt.Sprint("ops-", round), "admin")
		}
		res := doStream(t, e, ops.Token, update, map[string]any{"p": pr})
		wait.Eventually(t, 10*time.Second, blocked)
		must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": ops.TokenID}))
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		// One result (a mutation has one: its own error, or the stream's
		// when the operation's was not written), then complete.
		if strings.Contains(string(body), "UNAVAILABLE") || !strings.Contains(string(body), "UNAUTHENTICATED") ||
			strings.Count(string(body), "event: next") != 1 || !strings.HasSuffix(string(body), "event: complete\ndata: \n\n") {
			t.Fatalf("round %d: the stream of a mutation whose token was revoked: %s", round, body)
		}
	}
	// Over a WebSocket: closed with 4403; an answer sent first says the same.
	ops2 := newToken(t, e, acme.Admin.Token, "acme", "ops2", "admin")
	w := dialWS(t, e)
	w.init(ops2.Token)
	w.send(map[string]any{"id": "u", "type": "subscribe", "payload": map[string]any{"query": update, "variables": map[string]any{"p": pr}}})
	wait.Eventually(t, 10*time.Second, blocked)
	must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": ops2.TokenID}))
	for {
		m, err := w.read(10 * time.Second)
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != 4403 {
				t.Fatalf("the socket of a revoked token: %v", err)
			}
			break
		}
		if m["type"] == "error" || m["type"] == "next" {
			if s := fmt.Sprint(m); strings.Contains(s, "UNAVAILABLE") {
				t.Fatalf("the mutation of a revoked token: %v", m)
			}
		}
	}
	release()
	var v int
	if err := e.DB.Get(&v, `SELECT row_version FROM projects WHERE project_id = $1`, pr); err != nil || v != 1 {
		t.Fatalf("the project after the revoked mutations: version %d, %v", v, err)
	}
}

// sseEvents reads a graphql-sse event stream.
type sseReader struct {
	t   *testing.T
	res *http.Response
	br  *bufio.Reader
	id  string // the last event's id line
}

func openSSE(t *testing.T, e *testkit.Env, token, query string, vars map[string]any) *sseReader {
	t.Helper()
	return openSSEWith(t, e, token, query, vars, nil)
}

// openSSEWith opens a stream with more request headers (Last-Event-ID).
func openSSEWith(t *testing.T, e *testkit.Env, token, query string, vars map[string]any, h http.Header) *sseReader {
	t.Helper()
	res := doStreamWith(t, e, token, query, vars, h)
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("event stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	return &sseReader{t: t, res: res, br: bufio.NewReader(res.Body)}
}

// postStream POSTs a query to /graphql/stream and reads the whole answer
// (for answers that end: a refusal, a query's result).
func postStream(t *testing.T, e *testkit.Env, token, query string) (*http.Response, []byte) {
	t.Helper()
	res := doStream(t, e, token, query, nil)
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, raw
}

// doStream POSTs an operation to /graphql/stream as graphql-sse does.
func doStream(t *testing.T, e *testkit.Env, token, query string, vars map[string]any) *http.Response {
	t.Helper()
	return doStreamWith(t, e, token, query, vars, nil)
}

func doStreamWith(t *testing.T, e *testkit.Env, token, query string, vars map[string]any, h http.Header) *http.Response {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest("POST", e.Server.URL+"/graphql/stream", strings.NewReader(string(body)))
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// next returns the next event's name and data (comments skipped); s.id
// is its id line's ("" without one).
func (s *sseReader) next() (string, map[string]any) {
	s.t.Helper()
	var name, data string
	s.id = ""
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			s.t.Fatalf("event stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if name == "" {
				continue
			}
			var m map[string]any
			if data != "" {
				_ = json.Unmarshal([]byte(data), &m)
			}
			return name, m
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "id: "):
			s.id = strings.TrimPrefix(line, "id: ")
		}
	}
}

// GraphQL over SSE (graphql-sse, distinct connections): the same
// subscription as a stream of next events; errors before execution are a
// next event with errors, then complete.
func TestInstanceEventsOverSSE(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	s := openSSE(t, e, acme.Viewer.Token, eventsSub, map[string]any{"t": "acme"})
	waitSubscribers(t, e, 1)
	id := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "web", 1))).Str("instanceId")
	var types, eventIDs []string
	for len(types) < 3 {
		name, m := s.next()
		if name != "next" {
			t.Fatalf("event %s %v", name, m)
		}
		ev := m["data"].(map[string]any)["instanceEvents"].(map[string]any)
		if ev["instanceId"] != id {
			t.Fatalf("event of another instance: %v", ev)
		}
		// Each event says its id on an id line, which an EventSource
		// sends back as Last-Event-ID when it reconnects.
		if s.id == "" || s.id != ev["eventId"] {
			t.Fatalf("event %v has id line %q", ev["eventId"], s.id)
		}
		types = append(types, str(ev["type"]))
		eventIDs = append(eventIDs, s.id)
	}
	if strings.Join(types, ",") != "INSTANCE_CREATED,INSTANCE_PROVISIONING,INSTANCE_RUNNING" {
		t.Fatalf("types %v", types)
	}
	// A client reconnecting with Last-Event-ID resumes after that event,
	// without gap or duplicate, whatever its document's after says.
	again := openSSEWith(t, e, acme.Viewer.Token, eventsSub, map[string]any{"t": "acme", "a": "not-even-an-id"},
		http.Header{"Last-Event-ID": {eventIDs[0]}})
	for _, want := range eventIDs[1:] {
		if name, m := again.next(); name != "next" || again.id != want {
			t.Fatalf("resumed after %s: %s %q %v, want %s", eventIDs[0], name, again.id, m, want)
		}
	}
	// A refused header is named as such (the hub's check said "after"), an
	// id past the stream's end included.
	for _, bad := range []string{"evt_nope", "x\u00ff", events.EncodeID("acme", 1_000_000)} {
		r := openSSEWith(t, e, acme.Viewer.Token, eventsSub, map[string]any{"t": "acme"}, http.Header{"Last-Event-ID": {bad}})
		if name, m := r.next(); name != "next" || !strings.Contains(fmt.Sprint(m), "INVALID_INPUT") || !strings.Contains(fmt.Sprint(m), "path:Last-Event-ID") {
			t.Fatalf("Last-Event-ID %q: %s %v", bad, name, m)
		}
	}
	// One resume point: two headers are refused before any stream opens.
	two := doStreamWith(t, e, acme.Viewer.Token, eventsSub, map[string]any{"t": "acme"}, http.Header{"Last-Event-ID": {eventIDs[0], eventIDs[1]}})
	raw, _ := io.ReadAll(two.Body)
	two.Body.Close()
	if two.StatusCode != 400 || !strings.Contains(string(raw), `"path":"Last-Event-ID"`) {
		t.Fatalf("two Last-Event-ID headers: %d %s", two.StatusCode, raw)
	}
	// A refusal streams as next with errors, then complete.
	bad := openSSE(t, e, acme.Viewer.Token, eventsSub, map[string]any{"t": "other"})
	name, m := bad.next()
	if name != "next" || !strings.Contains(fmt.Sprint(m), "PERMISSION_DENIED") {
		t.Fatalf("refused subscription: %s %v", name, m)
	}
	if name, _ := bad.next(); name != "complete" {
		t.Fatalf("after the error: %s", name)
	}
	// An error before execution (validation) is a result with no data
	// entry, as the GraphQL spec answers a request error (it was
	// "data": null).
	invalid := openSSE(t, e, acme.Viewer.Token, `subscription { nope }`, nil)
	name, m = invalid.next()
	if _, has := m["data"]; name != "next" || has || !strings.Contains(fmt.Sprint(m), "reason:validation") {
		t.Fatalf("invalid subscription: %s %v", name, m)
	}
	if name, _ := invalid.next(); name != "complete" {
		t.Fatalf("after the request error: %s", name)
	}
	// A query over the stream: one next, then complete.
	q := openSSE(t, e, acme.Viewer.Token, `{ viewer { kind } }`, nil)
	if name, m := q.next(); name != "next" || m["data"] == nil {
		t.Fatalf("query over SSE: %s %v", name, m)
	}
	if name, _ := q.next(); name != "complete" {
		t.Fatalf("query over SSE did not complete: %s", name)
	}
}

// GraphiQL in headless Chromium: a subscription shows an instance go
// created, provisioning, running, stopping, stopped live as the calls are
// made.
func TestGraphiQLShowsASubscription(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	shots := filepath.Join(dir, "artifacts", t.Name())
	_ = os.RemoveAll(shots)
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("KEEP_SCREENSHOTS") == "" {
			_ = os.RemoveAll(shots)
		} else {
			t.Logf("screenshots: %s", shots)
		}
	})
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	// The sim takes a while per step, so each state shows long enough to see.
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"sim": map[string]any{"latencyMs": 700}})
	q := `subscription { instanceEvents(tenantId: "acme") { type state desiredState instanceId eventId } }`
	cmd := exec.Command("node", "graphiql-subscription.mjs", e.Server.URL, acme.Viewer.Token, q, "INSTANCE_STOPPED", shots)
	cmd.Dir = dir
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lines []string
	subscribed := false
	for !subscribed && sc.Scan() {
		lines = append(lines, sc.Text())
		subscribed = sc.Text() == "SUBSCRIBED"
	}
	if !subscribed {
		_ = cmd.Wait()
		t.Fatalf("GraphiQL did not subscribe: %v %s", lines, stderr.String())
	}
	id := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "web", 1))).Str("instanceId")
	waitState(t, e, acme.Member.Token, "acme", id, "running", 20*time.Second)
	must(t, e.Call(acme.Member.Token, "instances/stop", map[string]any{"tenantId": "acme", "instanceId": id}))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	_ = cmd.Wait()
	var got struct {
		Seen        []string
		Screenshots []string
		Error       string
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil || got.Error != "" {
		t.Fatalf("GraphiQL: %v %v %s", err, got.Error, stderr.String())
	}
	want := "INSTANCE_CREATED,INSTANCE_PROVISIONING,INSTANCE_RUNNING,INSTANCE_STOPPING,INSTANCE_STOPPED"
	if strings.Join(got.Seen, ",") != want {
		t.Fatalf("GraphiQL showed %v, want %s\n%s", got.Seen, want, stderr.String())
	}
}

// graphql-sse's own client (distinct connections mode) resumes from a
// cursor over /graphql/stream and sees a new instance's first moves.
func TestInstanceEventsWithGraphQLSSEClient(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	first := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "first", 1))).Str("instanceId")
	waitState(t, e, acme.Member.Token, "acme", first, "running", 20*time.Second)
	// The first instance's three events are readable once every older
	// transaction of the cluster has ended (the visibility horizon).
	var seen []string
	wait.Eventually(t, 20*time.Second, func() error {
		if seen = outbox(t, e, "acme", ""); len(seen) < 3 {
			return fmt.Errorf("the outbox shows %v", seen)
		}
		return nil
	})
	cursor := seen[len(seen)-1]
	second := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "second", 1))).Str("instanceId")
	q := fmt.Sprintf(`subscription { instanceEvents(tenantId: "acme", after: %q) { type instanceId eventId } }`, cursor)
	out, err := node(t, dir, "sse.mjs", e.Server.URL+"/graphql/stream", acme.Viewer.Token, q, "3")
	if err != nil {
		t.Fatalf("sse.mjs: %v %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[3] != "COMPLETE" {
		t.Fatalf("graphql-sse client printed:\n%s", out)
	}
	var types []string
	for _, l := range lines[:3] {
		var r struct {
			Data struct {
				InstanceEvents struct{ Type, InstanceID, EventID string }
			}
			Errors []any
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Errors != nil || r.Data.InstanceEvents.InstanceID != second {
			t.Fatalf("result %s (%v)", l, err)
		}
		types = append(types, r.Data.InstanceEvents.Type)
	}
	if strings.Join(types, ",") != "INSTANCE_CREATED,INSTANCE_PROVISIONING,INSTANCE_RUNNING" {
		t.Fatalf("types %v", types)
	}
}

// One socket runs at most 64 operations at once: the 65th subscribe gets
// a RATE_LIMITED error message and the socket stays usable; completing one
// makes room.
func TestOperationsPerSocketAreBounded(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	w := dialWS(t, e)
	w.init(acme.Viewer.Token)
	for i := 0; i < 64; i++ {
		w.subscribe(fmt.Sprint("s", i), map[string]any{"t": "acme"})
	}
	if got := opError(w.op("over", `{ viewer { kind } }`, nil)); got != "RATE_LIMITED" {
		t.Fatalf("the 65th operation: %q", got)
	}
	w.send(map[string]any{"id": "s0", "type": "complete"})
	try := 0
	wait.Eventually(t, 10*time.Second, func() error {
		try++
		w.send(map[string]any{"id": fmt.Sprint("q", try), "type": "subscribe", "payload": map[string]any{"query": `{ viewer { kind } }`}})
		var last map[string]any
		for last == nil || (last["id"] == fmt.Sprint("q", try) && last["type"] == "next") || last["id"] == "s0" {
			last = w.next()
		}
		if last["type"] == "complete" && last["id"] == fmt.Sprint("q", try) {
			return nil
		}
		return fmt.Errorf("no room after a complete: %v", last)
	})
}

// One event is rendered once per operation (document, variables, principal)
// and the bytes go to every subscription of that operation; subscribers
// whose answers differ never share one. Here the operator and the guest's
// viewer run the same document on guest's events in a pool acme offers to
// guest: the operator reads the instance's audit records, the guest's
// viewer does not (audit is the admins'), and each socket gets its own id.
func TestSharedRenderingsStayWithTheirOperation(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	guest := newTenant(t, e, "guest")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"capacity": map[string]any{"gpus": 16}})
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "guest",
		"quota": map[string]any{"gpus": 4, "instances": 2}}))
	const doc = `subscription { instanceEvents(tenantId: "guest") { eventId type
		instance { instanceId auditLog(first: 1) { totalCount } pool { poolId } } } }`
	type sock struct {
		w       *wsClient
		id      string
		byOwner bool
	}
	var socks []sock
	for i, s := range []struct {
		token   string
		byOwner bool
	}{{guest.Viewer.Token, false}, {e.Operator, true}, {guest.Viewer.Token, false}, {e.Operator, true}} {
		w := dialWS(t, e)
		w.init(s.token)
		id := fmt.Sprintf("s%d", i)
		w.send(map[string]any{"id": id, "type": "subscribe", "payload": map[string]any{"query": doc}})
		socks = append(socks, sock{w, id, s.byOwner})
	}
	// The subscriptions are live once the server counts them.
	addr := strings.TrimPrefix(e.Server.URL, "http://")
	wait.Eventually(t, 10*time.Second, func() error {
		if n := metric(t, addr, "compute_subscriptions"); n < float64(len(socks)) {
			return fmt.Errorf("the server counts %v subscriptions, want %d", n, len(socks))
		}
		return nil
	})
	must(t, e.Call(guest.Member.Token, "instances/create", instanceIn("guest", pool, "g", 1)))
	for _, s := range socks {
		m := s.w.next()
		if m["id"] != s.id || m["type"] != "next" {
			t.Fatalf("%s: %v", s.id, m)
		}
		p := m["payload"].(map[string]any)
		if p["errors"] != nil {
			t.Fatalf("%s: %v", s.id, p)
		}
		n := dig(t, p["data"], "instanceEvents", "instance", "auditLog", "totalCount")
		if (n != float64(0)) != s.byOwner {
			t.Fatalf("%s (operator %v) got %v audit records: a rendering crossed principals", s.id, s.byOwner, n)
		}
	}
}

// Subscription documents the spec refuses are INVALID_INPUT on both
// transports, never INTERNAL: two root fields (by response name, also
// through fragments), a root field under @skip or @include, and @defer
// (which no transport here delivers: it used to answer null silently).
func TestSubscriptionDocumentsAreValidated(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	const ev = `instanceEvents(tenantId: "acme")`
	bad := []struct {
		name, doc string
		vars      map[string]any
		says      string
	}{
		{"two aliases", `subscription { a: ` + ev + ` { eventId } b: ` + ev + ` { type } }`, nil, "only one top level field"},
		{"two through a fragment", `subscription { ...F } fragment F on Subscription { a: ` + ev + ` { eventId } b: ` + ev + ` { type } }`, nil, "only one top level field"},
		{"one plus a fragment", `subscription S { a: ` + ev + ` { eventId } ...F } fragment F on Subscription { b: ` + ev + ` { type } }`, nil, "only one top level field"},
		{"an inline fragment", `subscription { a: ` + ev + ` { eventId } ... on Subscription { b: ` + ev + ` { type } } }`, nil, "only one top level field"},
		{"skipped", `subscription { ` + ev + ` @skip(if: true) { eventId } }`, nil, "@skip"},
		{"not included", `subscription($x: Boolean!) { ` + ev + ` @include(if: $x) { eventId } }`, map[string]any{"x": false}, "@include"},
		{"included", `subscription($x: Boolean!) { ` + ev + ` @include(if: $x) { eventId } }`, map[string]any{"x": true}, "@include"},
		{"a skipped fragment", `subscription { ... @skip(if: true) { ` + ev + ` { eventId } } }`, nil, "@skip"},
		{"a skipped spread", `subscription { ...F @skip(if: true) } fragment F on Subscription { ` + ev + ` { eventId } }`, nil, "@skip"},
		{"introspection", `subscription { __typename }`, nil, "introspection"},
		{"defer", `subscription { ` + ev + ` { eventId ... @defer { instance { name } } } }`, nil, "@defer"},
	}
	check := func(t *testing.T, what string, errors any, says string) {
		list, _ := errors.([]any)
		if len(list) == 0 {
			t.Fatalf("%s: no errors: %v", what, errors)
		}
		first := list[0].(map[string]any)
		code := dig(t, first, "extensions", "code")
		if code != "INVALID_INPUT" || !strings.Contains(str(first["message"]), says) {
			t.Fatalf("%s: %v, want INVALID_INPUT saying %q", what, first, says)
		}
	}
	w := dialWS(t, e)
	w.init(acme.Viewer.Token)
	for i, c := range bad {
		msgs := w.op(fmt.Sprint("b", i), c.doc, c.vars)
		if len(msgs) != 1 || msgs[0]["type"] != "error" {
			t.Fatalf("%s over WebSocket: %v", c.name, msgs)
		}
		check(t, c.name+" over WebSocket", msgs[0]["payload"], c.says)
		s := openSSE(t, e, acme.Viewer.Token, c.doc, c.vars)
		name, m := s.next()
		if name != "next" {
			t.Fatalf("%s over SSE: %s %v", c.name, name, m)
		}
		check(t, c.name+" over SSE", m["errors"], c.says)
		if name, _ := s.next(); name != "complete" {
			t.Fatalf("%s over SSE: then %s", c.name, name)
		}
	}
	// @defer is refused on plain POST too (its parts used to come back null).
	r := e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { tenantId ... @defer { name } } }`, nil)
	if r.Status != 400 {
		t.Fatalf("@defer over POST: %d %s", r.Status, r.Raw)
	}
	check(t, "@defer over POST", r.Body["errors"], "@defer")
	// What stays valid: one response name asked twice (the fields merge),
	// and @skip below the root field.
	for i, doc := range []string{
		`subscription { ` + ev + ` { eventId } ` + ev + ` { type } }`,
		`subscription { ` + ev + ` { eventId type @skip(if: true) } }`,
	} {
		w.send(map[string]any{"id": fmt.Sprint("ok", i), "type": "subscribe", "payload": map[string]any{"query": doc}})
		if m, err := w.read(300 * time.Millisecond); err == nil {
			t.Fatalf("%s: %v", doc, m)
		}
	}
}

// TestSSEStartsAtOnceAndRefusesBrokenBodies: an event stream's status and
// headers are sent when it opens, not with its first event or keep-alive
// 15 s later; a body that is no GraphQL request is a 400 before any
// stream starts (found probing from outside).
func TestSSEStartsAtOnceAndRefusesBrokenBodies(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	client := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 3 * time.Second}}
	body, _ := json.Marshal(map[string]any{"query": `subscription { tenantEvents(tenantId: "acme") { eventId } }`})
	req, _ := http.NewRequest("POST", e.Server.URL+"/graphql/stream", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+acme.Viewer.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("a quiet tenant's stream sent no headers within 3 s: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for _, bad := range []string{`{"query":`, "{\"query\": \"subscription { a }\xff\"}", `[]`, `{"query": "{ viewer { id } }"} trailing`} {
		req, _ := http.NewRequest("POST", e.Server.URL+"/graphql/stream", strings.NewReader(bad))
		req.Header.Set("Authorization", "Bearer "+acme.Viewer.Token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 400 || !strings.Contains(string(b), "INVALID_INPUT") {
			t.Fatalf("%q: %d %s", bad, res.StatusCode, b)
		}
	}
}

// rawStream opens an event stream of eventsSub for tenant "acme" over a
// bare TCP connection with the given HTTP version and returns the parsed
// response (its body decoded as the response frames it) and the
// connection.
func rawStream(t *testing.T, e *testkit.Env, token, proto string, extra ...string) (*http.Response, net.Conn) {
	t.Helper()
	addr := strings.TrimPrefix(e.Server.URL, "http://")
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	vars, _ := json.Marshal(map[string]any{"t": "acme"})
	q := url.Values{"query": {eventsSub}, "variables": {string(vars)}}
	// The request and what follows it (extra) in one write.
	fmt.Fprintf(c, "GET /graphql/stream?%s %s\r\nHost: %s\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n%s", q.Encode(), proto, addr, token, strings.Join(extra, ""))
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		t.Fatalf("event stream: %s", res.Status)
	}
	return res, c
}

// A subscription's event stream over HTTP/1.1 leaves its handler (the
// connection is hijacked; one goroutine per stream, its reader): the body
// stays chunked and the connection is closed at its end (Connection:
// close); the stream ends properly with its last chunk; a client that
// leaves ends its subscription at once, not at the next keep-alive; an
// HTTP/1.0 client, which cannot take chunks, is streamed by the handler
// and its body ends with the connection.
func TestDetachedEventStreams(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	dash := newToken(t, e, acme.Admin.Token, "acme", "dash", "viewer")
	res, _ := rawStream(t, e, dash.Token, "HTTP/1.1")
	if !res.Close || len(res.TransferEncoding) != 1 || res.TransferEncoding[0] != "chunked" {
		t.Fatalf("want a chunked body and Connection: close, got %v %v", res.TransferEncoding, res.Header)
	}
	old, _ := rawStream(t, e, acme.Viewer.Token, "HTTP/1.0")
	if len(old.TransferEncoding) != 0 || !old.Close {
		t.Fatalf("HTTP/1.0: want a body that ends with the connection, got %v %v", old.TransferEncoding, old.Header)
	}
	_, leavingConn := rawStream(t, e, acme.Viewer.Token, "HTTP/1.1")
	talking, talkingConn := rawStream(t, e, acme.Viewer.Token, "HTTP/1.1")
	waitSubscribers(t, e, 4)
	// The client that leaves: its subscription ends at once (keep-alives
	// are 15 s apart here).
	leavingConn.Close()
	waitSubscribers(t, e, 3)
	// A client that sends after its request: a stray CRLF and a request it
	// pipelines (which gets no answer on this connection) are ignored, in
	// one segment or later ones.
	fmt.Fprintf(talkingConn, "\r\n")
	time.Sleep(50 * time.Millisecond)
	fmt.Fprintf(talkingConn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")

	id := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "web", 1))).Str("instanceId")
	talks := &sseReader{t: t, res: talking, br: bufio.NewReader(talking.Body)}
	for _, s := range []*sseReader{{t: t, res: res, br: bufio.NewReader(res.Body)}, {t: t, res: old, br: bufio.NewReader(old.Body)}, talks} {
		name, m := s.next()
		ev, _ := dig(t, m, "data", "instanceEvents").(map[string]any)
		if name != "next" || ev["instanceId"] != id || ev["type"] != "INSTANCE_CREATED" {
			t.Fatalf("first event: %s %v", name, m)
		}
	}
	// One that goes on sending past 1 KiB: its stream ends, properly; and
	// one that sent as much with its request (net/http had read it).
	fmt.Fprint(talkingConn, strings.Repeat("x", 2048))
	if rest, err := io.ReadAll(talks.br); err != nil || !strings.HasSuffix(string(rest), "event: complete\ndata: \n\n") {
		t.Fatalf("a stream whose client sent more: %q %v", rest, err)
	}
	waitSubscribers(t, e, 2)
	early, _ := rawStream(t, e, acme.Viewer.Token, "HTTP/1.1", strings.Repeat("y", 2048))
	if rest, err := io.ReadAll(early.Body); err != nil || rest == nil || !strings.HasSuffix(string(rest), "event: complete\ndata: \n\n") {
		t.Fatalf("a stream whose request came with 2 KiB more: %q %v", rest, err)
	}
	waitSubscribers(t, e, 2)
	// The token is revoked: the stream says so, completes, and its body
	// ends with its last chunk (io.EOF, not an unexpected one).
	must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": dash.TokenID}))
	rest, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("the body did not end properly: %v (read %q)", err, rest)
	}
	if !strings.Contains(string(rest), "UNAUTHENTICATED") || !strings.HasSuffix(string(rest), "event: complete\ndata: \n\n") {
		t.Fatalf("the stream's end: %q", rest)
	}
	waitSubscribers(t, e, 1)
}

// An Upgrade other than websocket (h2c, which a server may ignore) is an
// ordinary request: served over HTTP/1.1 as GraphQL over HTTP or as an
// event stream, and authenticated like one. Every such request was
// answered 426 by the WebSocket transport, without authentication.
func TestOtherUpgradesAreOrdinaryRequests(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	addr := strings.TrimPrefix(e.Server.URL, "http://")
	do := func(path, token, accept string) (*http.Response, string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		body := `{"query":"{ viewer { kind } }"}`
		auth := ""
		if token != "" {
			auth = "Authorization: Bearer " + token + "\r\n"
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"+
			"Content-Type: application/json\r\nAccept: %s\r\n%sContent-Length: %d\r\n\r\n%s", path, addr, accept, auth, len(body), body)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, body := do("/graphql", acme.Viewer.Token, "application/json"); res.StatusCode != 200 || !strings.Contains(body, `"kind"`) {
		t.Fatalf("a query with Upgrade: h2c: %s %s", res.Status, body)
	}
	if res, body := do("/graphql", "", "application/json"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %s %s", res.Status, body)
	}
	if res, body := do("/graphql/stream", acme.Viewer.Token, "text/event-stream"); res.StatusCode != 200 || !strings.Contains(body, `"kind"`) ||
		!strings.HasSuffix(body, "event: complete\ndata: \n\n") {
		t.Fatalf("an event stream with Upgrade: h2c: %s %q", res.Status, body)
	}
	if res, body := do("/graphql/stream", "", "text/event-stream"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an event stream without a token: %s %q", res.Status, body)
	}
}
