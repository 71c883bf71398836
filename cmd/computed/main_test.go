package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit/wait"
)

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve runs `computed serve` on the embedded default until stop is called.
func serve(t *testing.T, dataDir, addr string) (stop func()) {
	t.Helper()
	m := &Main{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.ParseFlags([]string{"serve", "-addr", addr, "-data-dir", dataDir, "-database-url", ""}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { err := m.Run(ctx); m.Close(); done <- err }()
	wait.Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("server stopped: %v", err)
		default:
		}
		return ready(addr)
	})
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	}
}

func post(t *testing.T, addr, token, method string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/compute/"+method, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// TestEmbeddedRestartKeepsData: the embedded default initialises a cluster,
// writes the operator token file (0600), keeps data across a restart, and
// recovers from a stale postmaster.pid left by a crash.
func TestEmbeddedRestartKeepsData(t *testing.T) {
	dir, err := os.MkdirTemp("", "computed-main-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(data0(dir), "postgres.log"))
			t.Logf("postgres.log:\n%s", b)
		}
		os.RemoveAll(dir)
	}()
	os.Chmod(dir, 0o755)
	data := filepath.Join(dir, "data")
	addr := freeAddr(t)

	// `computed migrate` initialises and migrates, then exits.
	mig := &Main{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := mig.ParseFlags([]string{"migrate", "-data-dir", data, "-database-url", ""}); err != nil {
		t.Fatal(err)
	}
	if err := mig.Run(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	mig.Close()
	if _, err := os.Stat(filepath.Join(data, "operator-token")); err == nil {
		t.Fatal("migrate should not bootstrap the operator")
	}

	stop := serve(t, data, addr)
	fi, err := os.Stat(filepath.Join(data, "operator-token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("operator-token: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(filepath.Join(data, "operator-token"))
	token := strings.TrimSpace(string(raw))
	if code, body := post(t, addr, token, "tenants/create", map[string]any{"tenantId": "acme", "name": "Acme"}); code != 200 {
		t.Fatalf("tenants.create: %d %v", code, body)
	}
	stop()

	// A crash leaves postmaster.pid behind naming a process that is gone.
	pid := filepath.Join(data, "pg", "postmaster.pid")
	if err := os.WriteFile(pid, []byte(fmt.Sprintf("%d\n%s\n", 999999, filepath.Join(data, "pg"))), 0o600); err != nil {
		t.Fatal(err)
	}
	stop = serve(t, data, addr)
	defer stop()
	code, body := post(t, addr, token, "tenants/get", map[string]any{"tenantId": "acme"})
	if code != 200 || body["name"] != "Acme" {
		t.Fatalf("after restart tenants.get: %d %v", code, body)
	}
}

func data0(dir string) string { return filepath.Join(dir, "data") }

// tempDir is a directory removed after the test, readable by the
// database's system user (the embedded cluster runs as postgres when root).
func tempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	return dir
}

// buildBinary builds computed into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "computed")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// process is a running computed; stop signals it and waits for its exit.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p process) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	<-p.exited
}

func startProcess(t *testing.T, bin, dataDir, addr string) process {
	t.Helper()
	cmd := exec.Command(bin, "serve", "-addr", addr, "-data-dir", dataDir, "-database-url", "")
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "COMPUTE_RATE_LIMIT=0")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	wait.Eventually(t, 90*time.Second, func() error {
		select {
		case <-exited:
			t.Fatalf("server exited: %s", logs.String())
		default:
		}
		if err := ready(addr); err != nil {
			return fmt.Errorf("%v: %s", err, logs.String())
		}
		return nil
	})
	return process{cmd, exited}
}

// ready is nil once the server at addr answers /readyz with 200.
func ready(addr string) error {
	res, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return fmt.Errorf("server not ready: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("server not ready: /readyz %d", res.StatusCode)
	}
	return nil
}

// TestRestartAfterKillUnderWriteLoad: kill -9 of the server while it
// writes, then an immediate restart. The old database server, told to stop
// when its parent died, is still writing its shutdown checkpoint; the new
// start waits for it instead of failing, and no acknowledged write is lost.
func TestRestartAfterKillUnderWriteLoad(t *testing.T) {
	dir := tempDir(t, "computed-kill-")
	bin := buildBinary(t, dir)
	data := filepath.Join(dir, "data")
	addr := freeAddr(t)
	for round := 0; round < 2; round++ {
		p := startProcess(t, bin, data, addr)
		raw, _ := os.ReadFile(filepath.Join(data, "operator-token"))
		token := strings.TrimSpace(string(raw))
		// Writers create tenants until the server dies; every 200 counts.
		var mu sync.Mutex
		var acked []string
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				client := &http.Client{Timeout: 5 * time.Second}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					b, _ := json.Marshal(map[string]any{"tenantId": id, "name": id})
					req, _ := http.NewRequest("POST", "http://"+addr+"/api/compute/tenants/create", bytes.NewReader(b))
					req.Header.Set("Authorization", "Bearer "+token)
					res, err := client.Do(req)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode == 200 {
						mu.Lock()
						acked = append(acked, id)
						mu.Unlock()
					}
				}
			}(w)
		}
		// Killed while the writers write, once some writes were acknowledged.
		wait.Eventually(t, 30*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(acked) < 20 {
				return fmt.Errorf("%d writes acknowledged", len(acked))
			}
			return nil
		})
		p.stop(syscall.SIGKILL)
		close(stop)
		wg.Wait()
		if len(acked) == 0 {
			t.Fatal("no write was acknowledged before the kill")
		}
		p = startProcess(t, bin, data, addr)
		for _, id := range acked {
			if code, body := post(t, addr, token, "tenants/get", map[string]any{"tenantId": id}); code != 200 {
				t.Fatalf("acknowledged tenant %s lost after kill -9: %d %v", id, code, body)
			}
		}
		t.Logf("round %d: %d acknowledged writes survived kill -9 and an immediate restart", round, len(acked))
		p.stop(syscall.SIGTERM)
	}
}

// TestEmbeddedDatabaseStoppingStopsTheServer: the embedded database ended
// under the server (here as pg_ctl stop -m fast ends it: SIGINT to the
// postmaster) ends the server with an error, instead of serving 503s
// forever while /healthz says the process is fine.
func TestEmbeddedDatabaseStoppingStopsTheServer(t *testing.T) {
	dir := tempDir(t, "computed-pgstop-")
	addr := freeAddr(t)
	m := &Main{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.ParseFlags([]string{"serve", "-addr", addr, "-data-dir", filepath.Join(dir, "data"), "-database-url", ""}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { err := m.Run(context.Background()); m.Close(); done <- err }()
	wait.Eventually(t, 60*time.Second, func() error { return ready(addr) })
	if err := m.pg.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "embedded database") || !strings.Contains(err.Error(), "postgres.log") {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the server kept running without its database")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("the server still listens")
	}
}

// Retentions: a Go duration of at least a minute or a number of days, at
// most 100 years either way (200000d wrapped around to a negative
// duration, which would have pruned every event and audit record).
func TestParseRetention(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"7d": 7 * 24 * time.Hour, "1d": 24 * time.Hour, "36h": 36 * time.Hour, "1m": time.Minute,
		"36500d": 36500 * 24 * time.Hour, "876000h": 876000 * time.Hour,
	} {
		if got, err := parseRetention("X", s); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0d", "-1d", "36501d", "200000d", "99999999999999999999d", "876001h", "59s", "-5m", "d", "7D", "1e3d", "x"} {
		if got, err := parseRetention("X", s); err == nil {
			t.Errorf("%q: accepted as %v", s, got)
		}
	}
}

// TestParseFlagsRefusesWhatItCannotUse: every variable goes through its
// flag's parser, so a value the flag refuses stops the start. Before, the
// environment's parse errors were dropped: COMPUTE_RATE_LIMIT=1OO became 0,
// which turns the limit off, and COMPUTE_REQUEST_TIMEOUT=15 (no unit)
// became the default. Values that parse but mean nothing (a negative or
// infinite rate, no workers) are refused too, by flag or by variable.
func TestParseFlagsRefusesWhatItCannotUse(t *testing.T) {
	for _, v := range []string{"COMPUTE_RATE_LIMIT", "COMPUTE_REQUEST_TIMEOUT", "COMPUTE_STATEMENT_TIMEOUT", "COMPUTE_DB_MAX_CONNS",
		"COMPUTE_GRAPHQL_CONCURRENCY", "COMPUTE_SESSIONS_PER_CREDENTIAL", "COMPUTE_RECONCILE_WORKERS", "COMPUTE_ADDR",
		"COMPUTE_DEBUG_ADDR", "COMPUTE_ALLOWED_ORIGINS"} {
		t.Setenv(v, "")
	}
	parse := func(env map[string]string, args ...string) (*Main, error) {
		for k, v := range env {
			t.Setenv(k, v)
		}
		defer func() {
			for k := range env {
				t.Setenv(k, "")
			}
		}()
		m := &Main{}
		return m, m.ParseFlags(args)
	}
	refused := []struct {
		env  map[string]string
		args []string
		want string // in the error: what was wrong, named as the operator set it
	}{
		{map[string]string{"COMPUTE_RATE_LIMIT": "1OO"}, nil, "COMPUTE_RATE_LIMIT"},
		{map[string]string{"COMPUTE_RATE_LIMIT": "-1"}, nil, "rate-limit"},
		{map[string]string{"COMPUTE_RATE_LIMIT": "NaN"}, nil, "rate-limit"},
		{nil, []string{"-rate-limit", "-1"}, "rate-limit"},
		{nil, []string{"-rate-limit", "+Inf"}, "rate-limit"},
		{map[string]string{"COMPUTE_REQUEST_TIMEOUT": "15"}, nil, "COMPUTE_REQUEST_TIMEOUT"},
		{nil, []string{"-request-timeout", "0s"}, "request-timeout"},
		{nil, []string{"-request-timeout", "-1s"}, "request-timeout"},
		{map[string]string{"COMPUTE_STATEMENT_TIMEOUT": "ten"}, nil, "COMPUTE_STATEMENT_TIMEOUT"},
		{nil, []string{"-statement-timeout", "0s"}, "statement-timeout"},
		{map[string]string{"COMPUTE_DB_MAX_CONNS": "3O"}, nil, "COMPUTE_DB_MAX_CONNS"},
		{map[string]string{"COMPUTE_DB_MAX_CONNS": "5"}, nil, "5"},
		{map[string]string{"COMPUTE_DB_MAX_CONNS": "6"}, nil, "6"}, // below 7: 3 listeners, the health check, 1 provider, 2 pool
		{map[string]string{"COMPUTE_GRAPHQL_CONCURRENCY": "-1"}, nil, "graphql-concurrency"},
		{map[string]string{"COMPUTE_SESSIONS_PER_CREDENTIAL": "0"}, nil, "sessions-per-credential"},
		{map[string]string{"COMPUTE_RECONCILE_WORKERS": "x"}, nil, "COMPUTE_RECONCILE_WORKERS"},
		{nil, []string{"-reconcile-workers", "0"}, "reconcile-workers"},
		// Values that parse but mean something else than they say (a probe):
		{map[string]string{"COMPUTE_RATE_LIMIT": "1e19"}, nil, "rate-limit"},                // its burst overflowed to 1
		{map[string]string{"COMPUTE_RATE_LIMIT": "1e-300"}, nil, "rate-limit"},              // a Retry-After of 1 s
		{map[string]string{"COMPUTE_STATEMENT_TIMEOUT": "500us"}, nil, "statement-timeout"}, // sent as 0: no timeout
		{map[string]string{"COMPUTE_STATEMENT_TIMEOUT": "99ms"}, nil, "statement-timeout"},  // 1ms canceled the replica's own work, and its start
		{map[string]string{"COMPUTE_STATEMENT_TIMEOUT": "1000h"}, nil, "statement-timeout"},
		{map[string]string{"COMPUTE_REQUEST_TIMEOUT": "1ns"}, nil, "request-timeout"},
		{map[string]string{"COMPUTE_RECONCILE_WORKERS": "10001"}, nil, "reconcile-workers"},
		{map[string]string{"COMPUTE_DB_MAX_CONNS": "100000"}, nil, "db-max-conns"},
		{map[string]string{"COMPUTE_GRAPHQL_CONCURRENCY": "100000"}, nil, "graphql-concurrency"},
		{map[string]string{"COMPUTE_ADDR": "garbage"}, nil, "addr"},
		{map[string]string{"COMPUTE_ADDR": "127.0.0.1:99999"}, nil, "addr"},
		{map[string]string{"COMPUTE_DEBUG_ADDR": "nope"}, nil, "debug-addr"},
		{map[string]string{"COMPUTE_ALLOWED_ORIGINS": "dash.example.com,[bad,late.example.com"}, nil, "COMPUTE_ALLOWED_ORIGINS"},
	}
	for _, c := range refused {
		if m, err := parse(c.env, c.args...); err == nil {
			t.Errorf("%v %v: accepted (rate %v, timeout %v, workers %d)", c.env, c.args, m.RateLimit, m.RequestTimeout, m.Instances.Workers)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v; want it to name %s", c.env, c.args, err, c.want)
		}
	}
	// The defaults, a variable, and a flag over a variable.
	m, err := parse(nil)
	if err != nil || m.RateLimit != 100 || m.RequestTimeout != 15*time.Second || m.StatementTimeout != 10*time.Second ||
		m.DBMaxConns != 30 || m.SessionsPerCredential != 256 || m.Instances.Workers != 10 || m.Addr != "127.0.0.1:8080" {
		t.Fatalf("defaults: %+v, %v", m, err)
	}
	m, err = parse(map[string]string{"COMPUTE_RATE_LIMIT": "0", "COMPUTE_REQUEST_TIMEOUT": "30s", "COMPUTE_ADDR": "127.0.0.1:9",
		"COMPUTE_ALLOWED_ORIGINS": "dash.example.com, https://*.corp.example"}, "-addr", "127.0.0.1:10")
	if err != nil || m.RateLimit != 0 || m.RequestTimeout != 30*time.Second || m.Addr != "127.0.0.1:10" {
		t.Fatalf("set: rate %v, timeout %v, addr %s, %v", m.RateLimit, m.RequestTimeout, m.Addr, err)
	}
	if len(m.Origins) != 2 || m.Origins[1] != "https://*.corp.example" {
		t.Fatalf("origins: %q", m.Origins)
	}
	for _, addr := range []string{":8080", "[::1]:8080", "localhost:0"} {
		if _, err := parse(map[string]string{"COMPUTE_ADDR": addr}); err != nil {
			t.Errorf("COMPUTE_ADDR=%s: %v", addr, err)
		}
	}
}

// A start step that fails is tried again, up to its tries, and a canceled
// start ends the tries (the reconciler's River client stopped the replica
// on one statement canceled by the statement timeout at start).
func TestRetryStart(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	calls := 0
	step := func(fail int) func(context.Context) error {
		calls = 0
		return func(context.Context) error {
			calls++
			if calls <= fail {
				return fmt.Errorf("canceling statement due to statement timeout")
			}
			return nil
		}
	}
	if err := retryStart(context.Background(), log, "x", 4, time.Millisecond, step(3)); err != nil || calls != 4 {
		t.Fatalf("three failures of four tries: %v after %d calls", err, calls)
	}
	if err := retryStart(context.Background(), log, "x", 4, time.Millisecond, step(4)); err == nil || calls != 4 {
		t.Fatalf("four failures of four tries: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := retryStart(ctx, log, "x", 4, time.Hour, step(4)); err == nil || calls != 1 {
		t.Fatalf("canceled: %v after %d calls", err, calls)
	}
}
