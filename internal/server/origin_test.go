package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
)

// TestWebSocketOrigins: a browser page of another origin cannot open a
// socket, and the refusal
// is the contract's error like every other refusal: JSON with a code, not coder/websocket's plain text. The server's own
// origin, a configured one and a client that sends no Origin (a daemon,
// a script) open sockets.
func TestWebSocketOrigins(t *testing.T) {
	d := testkit.DB(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	metrics := prometheus.NewRegistry()
	hs := httptest.NewServer(server.New(server.Config{AllowedOrigins: []string{"dash.example.com"}}, d, app.Registry(d, log, metrics, nil), metrics, log).Handler())
	defer hs.Close()
	ws := "ws" + strings.TrimPrefix(hs.URL, "http") + "/graphql"

	for _, origin := range []string{"", hs.URL, "https://dash.example.com"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		c, _, err := websocket.Dial(ctx, ws, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}, HTTPHeader: h})
		cancel()
		if err != nil {
			t.Fatalf("Origin %q: %v", origin, err)
		}
		_ = c.CloseNow()
	}

	for _, c := range []struct {
		origin, version string
		status          int
		code            string
	}{
		{"https://evil.example.net", "13", 403, "PERMISSION_DENIED"},
		{"null", "13", 403, "PERMISSION_DENIED"},
		{"", "12", 400, "INVALID_INPUT"},
	} {
		req, _ := http.NewRequest("GET", hs.URL+"/graphql", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", c.version)
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Sec-WebSocket-Protocol", "graphql-transport-ws")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var body struct {
			Error struct {
				Code    string         `json:"code"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &body); err != nil || res.StatusCode != c.status || body.Error.Code != c.code ||
			!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || res.Header.Get("X-Request-Id") == "" {
			t.Fatalf("Origin %q, version %s: %d %s %s", c.origin, c.version, res.StatusCode, res.Header.Get("Content-Type"), b)
		}
		if c.origin != "" && strings.Contains(string(b), c.origin) {
			t.Fatalf("the refusal echoes the Origin: %s", b)
		}
	}

	// Only a GET upgrades: a POST a proxy tagged with Upgrade is a GraphQL
	// request like any other (it was refused 405, without Allow).
	req, _ := http.NewRequest("POST", hs.URL+"/graphql", strings.NewReader(`{"query":"{ __typename }"}`))
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusMethodNotAllowed || !strings.Contains(string(b), "UNAUTHENTICATED") {
		t.Fatalf("a POST with Upgrade: %d %s", res.StatusCode, b)
	}
}
