package rest

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
)

// Every field still loading when a request's deadline passes fails with it:
// the answer says the request ran past its deadline (it said the database
// was unavailable, which it need not be: the request may have waited for an
// execution slot), and the log says so once per request (a helper's probe:
// 121 lines for one GraphQL request).
func TestDeadlineIsLoggedOncePerRequest(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	for _, id := range []string{"req_a", "req_b"} {
		ctx, cancel := context.WithDeadline(reqctx.WithRequestID(context.Background(), id), time.Now().Add(-time.Second))
		for range 120 {
			e := PublicError(ctx, log, context.DeadlineExceeded, "field", "tenant.pools")
			if e.Code != errs.Unavailable || e.Details["reason"] != "deadline" || strings.Contains(e.Message, "database") {
				t.Fatalf("a request past its deadline: %s %v", e.Message, e.Details)
			}
		}
		cancel()
	}
	if n := strings.Count(buf.String(), `"msg":"request past its deadline"`); n != 2 {
		t.Fatalf("%d log lines for two requests past their deadline:\n%s", n, buf.String())
	}
}
