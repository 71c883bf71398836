// Package testkit starts what tests need: one throwaway PostgreSQL cluster
// per test binary and a fresh migrated database per test (both from
// testkit/pgtest), and the whole HTTP server over it.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/instances/runner"
	"github.com/bettercompute/computed/internal/pgembed"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit/pgtest"
)

// Main runs a package's tests with the shared cluster and stops it after.
func Main(m *testing.M) {
	code := m.Run()
	if err := writeExamples(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	pgtest.Stop()
	os.Exit(code)
}

// Cluster returns the shared cluster, starting it on first use.
func Cluster(t testing.TB) *pgembed.Server { t.Helper(); return pgtest.Cluster(t) }

// DB returns a fresh migrated database for one test.
func DB(t testing.TB) *store.DB { t.Helper(); return pgtest.DB(t) }

// DBURL creates a fresh migrated database for one test and returns its URL.
func DBURL(t testing.TB) string { t.Helper(); return pgtest.DBURL(t) }

func open(t testing.TB, url string) *store.DB { t.Helper(); return pgtest.Open(t, url) }

// Env is a running server over a fresh database.
type Env struct {
	T        testing.TB
	DB       *store.DB
	Server   *httptest.Server
	Operator string // the operator's bearer token
	// Instances runs the instances service's jobs (its reconciler) in the
	// test; Instances.Service() is the service.
	Instances *runner.Runner
	Srv       *server.Server
	Proxy     *Proxy // nil unless Options.Proxy

	counts *sync.Map                         // request id -> statements
	hook   *atomic.Pointer[func(sql string)] // shared by copies of the Env
}

// OnStatement calls f with the SQL of every statement a request served by
// the test server sends, before it is sent (nil: stop calling).
func (e *Env) OnStatement(f func(sql string)) {
	if f == nil {
		e.hook.Store(nil)
		return
	}
	e.hook.Store(&f)
}

// OperatorToken is the bootstrap secret tests use.
const OperatorToken = "bco_test-operator-token"

// StartDB is a fresh database with the operator bootstrapped and no server
// in this process (tests that run server processes of their own).
func StartDB(t testing.TB) *Env {
	t.Helper()
	d := DB(t)
	return &Env{T: t, DB: d, Operator: OperatorToken, counts: &sync.Map{}}
}

// Options change what Start starts.
type Options struct {
	// Config is the server's configuration (the zero value: defaults, no
	// rate limit).
	Config server.Config
	// Logs receives the server's JSON log lines.
	Logs io.Writer
	// Proxy puts a TCP proxy between the server and PostgreSQL, which the
	// test can freeze (Env.Proxy) to play a database that stops answering.
	Proxy bool
	// DatabaseURL, when set, is the database to serve (another Env's
	// DB.URL: a second replica on the same database) instead of a fresh one.
	DatabaseURL string
	// Instances configures the instances service (its reconciler and the
	// retention jobs); SweepEvery defaults to 1 s.
	Instances runner.Config
}

// Start starts the whole HTTP server on a fresh database.
func Start(t testing.TB) *Env { return StartWith(t, Options{}) }

// StartWith starts the whole HTTP server on a fresh database, as o says.
func StartWith(t testing.TB, o Options) *Env {
	t.Helper()
	url := o.DatabaseURL
	if url == "" {
		url = DBURL(t)
	}
	var proxy *Proxy
	if o.Proxy {
		addr := pgtest.Addr(t)
		proxy = NewProxy(t, addr)
		url = strings.Replace(url, addr, proxy.Addr(), 1)
	}
	d := open(t, url)
	if err := auth.EnsureOperator(context.Background(), d, OperatorToken); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.Logs != nil {
		log = slog.New(slog.NewJSONHandler(o.Logs, nil))
	}
	metrics := prometheus.NewRegistry()
	// The instances service can queue jobs from the start; its reconciler
	// runs only in tests that ask for it (RunReconciler), so the others
	// pay for no polling.
	icfg := o.Instances
	if icfg.SweepEvery == 0 {
		icfg.SweepEvery = time.Second
	}
	inst, err := runner.New(d, log, icfg)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the database's cleanup, so it runs first.
	t.Cleanup(func() { _ = inst.Shutdown(context.Background()); inst.Close() })
	reg := app.Registry(d, log, metrics, inst.Service())
	if o.Config.Health == nil {
		// /readyz's own connection, as a replica has (computed serve).
		h, err := store.OpenWith(context.Background(), url, store.Options{MaxConns: 1, Role: "health", CloseOnCancel: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		o.Config.Health = h
	}
	srv := server.New(o.Config, d, reg, metrics, log)
	runCtx, stopRun := context.WithCancel(context.Background())
	go srv.Run(runCtx) //nolint:errcheck // ends with the test
	t.Cleanup(stopRun)
	env := &Env{T: t, DB: d, Operator: OperatorToken, Instances: inst, Srv: srv, Proxy: proxy, counts: &sync.Map{}, hook: &atomic.Pointer[func(sql string)]{}}
	h := srv.Handler()
	// Count each request's SQL statements, keyed by its request id.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &store.Counter{Hook: func(sql string) {
			if f := env.hook.Load(); f != nil {
				(*f)(sql)
			}
		}}
		h.ServeHTTP(w, r.WithContext(store.WithCounter(r.Context(), c)))
		env.counts.Store(w.Header().Get("X-Request-Id"), c.N())
	}))
	t.Cleanup(hs.Close)
	env.Server = hs
	return env
}

// RunReconciler starts the vps.instances reconciler of the server under
// test (stopped at cleanup) and returns e.
func (e *Env) RunReconciler() *Env {
	e.T.Helper()
	if err := e.Instances.Run(context.Background()); err != nil {
		e.T.Fatalf("start the reconciler: %v", err)
	}
	return e
}

// Statements is the number of SQL statements the request sent.
func (e *Env) Statements(r Resp) int64 {
	e.T.Helper()
	id := r.Header.Get("X-Request-Id")
	for i := 0; i < 200; i++ {
		if n, ok := e.counts.Load(id); ok {
			return n.(int64)
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.T.Fatalf("no statement count for request %s", id)
	return 0
}

// Resp is a decoded response.
type Resp struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// Code is the error code of an error response, "" on success.
func (r Resp) Code() string {
	if e, ok := r.Body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

// Path is details.path of an error response.
func (r Resp) Path() string {
	s, _ := r.Details()["path"].(string)
	return s
}

// Details are the details of an error response (nil on success).
func (r Resp) Details() map[string]any {
	if e, ok := r.Body["error"].(map[string]any); ok {
		d, _ := e["details"].(map[string]any)
		return d
	}
	return nil
}

// Message is the message of an error response.
func (r Resp) Message() string {
	if e, ok := r.Body["error"].(map[string]any); ok {
		s, _ := e["message"].(string)
		return s
	}
	return ""
}

// Str reads a string field of a success body.
func (r Resp) Str(key string) string {
	s, _ := r.Body[key].(string)
	return s
}

// Call posts body (a value or raw string) to /api/compute/{method} with token.
func (e *Env) Call(token, method string, body any) Resp {
	e.T.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		raw, _ = json.Marshal(b)
	}
	req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/api/compute/"+method, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return e.Do(req)
}

// GraphQL posts a GraphQL request.
func (e *Env) GraphQL(token, query string, vars map[string]any) Resp {
	e.T.Helper()
	raw, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/graphql", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/graphql-response+json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return e.Do(req)
}

// Do sends a request to the server and decodes the answer; an answer of the
// method surface is checked against the OpenAPI document (check.go).
func (e *Env) Do(req *http.Request) Resp {
	e.T.Helper()
	var body []byte
	if req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			body, _ = io.ReadAll(rc)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := Resp{Status: res.StatusCode, Header: res.Header, Raw: b}
	_ = json.Unmarshal(b, &r.Body)
	e.checkAnswer(req, body, r)
	return r
}

// Must fails the test unless r is a 200.
func (e *Env) Must(r Resp) Resp {
	e.T.Helper()
	if r.Status != http.StatusOK {
		e.T.Fatalf("want 200, got %d: %s", r.Status, r.Raw)
	}
	return r
}

// Tenant creates a tenant and returns tokens for admin, member and viewer.
func (e *Env) Tenant(id string) (admin, member, viewer string) {
	e.T.Helper()
	e.Must(e.Call(e.Operator, "tenants/create", map[string]any{"tenantId": id, "name": "Tenant " + id}))
	tok := func(role string) string {
		r := e.Must(e.Call(e.Operator, "tokens/create", map[string]any{"tenantId": id, "name": role, "role": role}))
		return r.Body["secret"].(string)
	}
	return tok("admin"), tok("member"), tok("viewer")
}
