package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/clientaddr"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
)

// failUntilLimited sends unknown tokens with the given forwarding header
// until one answers 429, and returns how many answered 401 first.
func failUntilLimited(t *testing.T, e *testkit.Env, header map[string]string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"tenantId": "acme"})
	for i := 0; i < 50; i++ {
		h := map[string]string{"Authorization": fmt.Sprintf("Bearer bct_guess-%d", i)}
		for k, v := range header {
			h[k] = v
		}
		r := rawCall(t, e, http.MethodPost, "/api/compute/tenants/get", h, body)
		switch r.Status {
		case 401:
		case 429:
			return i
		default:
			t.Fatalf("unknown token: %d %s", r.Status, r.Raw)
		}
	}
	t.Fatalf("50 unknown tokens were never throttled (header %v)", header)
	return 0
}

// Issue 18: without trusted proxies (the default), a forwarding header
// changes nothing: a client cannot escape its address's failed-auth budget
// by sending X-Forwarded-For or Forwarded. Behind a trusted proxy, the
// right-most untrusted hop is the client: callers behind the proxy have
// budgets of their own, a hop a client prepends is ignored, and the
// request log shows the address the limits used.
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	t.Run("untrusted peer", func(t *testing.T) {
		t.Parallel()
		var logs logbuf.Buffer
		e := testkit.StartWith(t, testkit.Options{Logs: &logs, Config: server.Config{AuthFailures: 0.001, AuthFailureBurst: 3}})
		newTenant(t, e, "acme")
		if n := failUntilLimited(t, e, nil); n != 3 {
			t.Fatalf("%d failures before 429, want 3", n)
		}
		// Spoofed headers from an untrusted peer: the same address, the
		// same spent budget.
		for i, h := range []map[string]string{
			{"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.10"},
			{"X-Forwarded-For": "203.0.113.11, 127.0.0.1"}, {"X-Real-Ip": "203.0.113.12"},
		} {
			if n := failUntilLimited(t, e, h); n != 0 {
				t.Fatalf("spoof %d %v: %d more failures allowed", i, h, n)
			}
		}
		if strings.Contains(logs.String(), "203.0.113.") || !strings.Contains(logs.String(), `"clientAddr":"127.0.0.1"`) {
			t.Fatalf("the request log does not show the peer's address:\n%.2000s", logs.String())
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		t.Parallel()
		var logs logbuf.Buffer
		e := testkit.StartWith(t, testkit.Options{Logs: &logs, Config: server.Config{AuthFailures: 0.001, AuthFailureBurst: 3,
			ClientAddr: clientaddr.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}})
		acme := newTenant(t, e, "acme")
		a := map[string]string{"X-Forwarded-For": "203.0.113.9"}
		if n := failUntilLimited(t, e, a); n != 3 {
			t.Fatalf("client A: %d failures before 429, want 3", n)
		}
		// Another client behind the same proxy has its own budget.
		if n := failUntilLimited(t, e, map[string]string{"X-Forwarded-For": "203.0.113.20"}); n != 3 {
			t.Fatalf("client B: %d failures before 429, want 3", n)
		}
		// A prepends a made-up hop: the proxy appended A's real address,
		// which is what counts.
		if n := failUntilLimited(t, e, map[string]string{"X-Forwarded-For": "198.51.100.1, 203.0.113.9"}); n != 0 {
			t.Fatalf("client A with a spoofed hop: %d more failures", n)
		}
		// Forwarded is not the configured header: it changes nothing.
		if n := failUntilLimited(t, e, map[string]string{"Forwarded": "for=198.51.100.2", "X-Forwarded-For": "203.0.113.9"}); n != 0 {
			t.Fatalf("client A with a Forwarded header: %d more failures", n)
		}
		// A's valid credential passes all the same.
		body, _ := json.Marshal(map[string]any{"tenantId": "acme"})
		expect(t, rawCall(t, e, http.MethodPost, "/api/compute/tenants/get", map[string]string{"Authorization": "Bearer " + acme.Admin.Token, "X-Forwarded-For": "203.0.113.9"}, body), ok, "")
		for _, want := range []string{`"clientAddr":"203.0.113.9"`, `"clientAddr":"203.0.113.20"`} {
			if !strings.Contains(logs.String(), want) {
				t.Fatalf("the request log lacks %s:\n%.2000s", want, logs.String())
			}
		}
		if strings.Contains(logs.String(), `"clientAddr":"198.51.100.`) {
			t.Fatal("a spoofed hop reached the request log")
		}
	})
}
