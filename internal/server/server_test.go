package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type empty struct{}

func errorMethods() []registry.Method {
	return []registry.Method{
		registry.Def(registry.Method{Group: "test", Name: "fail", Kind: registry.Read, Credential: registry.JoinToken, Module: "test", Phase: "v0"},
			nil, func(context.Context, store.Q, *empty) (*empty, error) {
				return nil, errors.New("pq: relation secret_table at 10.0.0.7 exploded")
			}),
		registry.Def(registry.Method{Group: "test", Name: "panic", Kind: registry.Read, Credential: registry.JoinToken, Module: "test", Phase: "v0"},
			nil, func(context.Context, store.Q, *empty) (*empty, error) { panic("secret internals") }),
	}
}

func post(t *testing.T, url string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res, body
}

// Bugs and panics are INTERNAL naming only the request id.
func TestInternalErrorsDoNotLeak(t *testing.T) {
	d := testkit.DB(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	metrics := prometheus.NewRegistry()
	reg := registry.New(d, log, metrics, app.Groups(), errorMethods())
	hs := httptest.NewServer(server.New(server.Config{}, d, reg, metrics, log).Handler())
	defer hs.Close()
	for _, m := range []string{"fail", "panic"} {
		res, body := post(t, hs.URL+"/api/compute/test/"+m)
		e, _ := body["error"].(map[string]any)
		details, _ := e["details"].(map[string]any)
		if res.StatusCode != 500 || e["code"] != "INTERNAL" || details["requestId"] != res.Header.Get("X-Request-Id") || res.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%s: %d %v", m, res.StatusCode, body)
		}
		if b, _ := json.Marshal(body); strings.Contains(string(b), "secret") || strings.Contains(string(b), "10.0.0.7") {
			t.Fatalf("%s leaks internals: %s", m, b)
		}
	}
}

// An unreachable database is UNAVAILABLE (503) on the method surface and
// GraphQL, and /readyz says not ready; /healthz still answers.
func TestDatabaseUnreachable(t *testing.T) {
	cfg, err := pgx.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	d := &store.DB{DB: sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")}
	defer d.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	metrics := prometheus.NewRegistry()
	hs := httptest.NewServer(server.New(server.Config{}, d, app.Registry(d, log, metrics, nil), metrics, log).Handler())
	defer hs.Close()

	req, _ := http.NewRequest("POST", hs.URL+"/api/compute/tenants/get", strings.NewReader(`{"tenantId":"acme"}`))
	req.Header.Set("Authorization", "Bearer bct_anything")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if res.StatusCode != 503 || body["error"]["code"] != "UNAVAILABLE" {
		t.Fatalf("method surface: %d %v", res.StatusCode, body)
	}

	req, _ = http.NewRequest("POST", hs.URL+"/graphql", strings.NewReader(`{"query":"{ viewer { name } }"}`))
	req.Header.Set("Authorization", "Bearer bct_anything")
	req.Header.Set("Content-Type", "application/json")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 503 || !strings.Contains(string(b), `"UNAVAILABLE"`) {
		t.Fatalf("graphql: %d %s", res.StatusCode, b)
	}

	for path, want := range map[string]int{"/readyz": 503, "/healthz": 200} {
		res, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("%s: %d, want %d", path, res.StatusCode, want)
		}
	}
}
