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
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("server stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("server not ready within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
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
