package auth_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
	"github.com/bettercompute/computed/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestFromHeader(t *testing.T) {
	for _, c := range []struct {
		in, tok string
		ok      bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"  Bearer   abc  ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"", "", false},
		{"Bearer " + strings.Repeat("x", 512), strings.Repeat("x", 512), true},
		{"Bearer " + strings.Repeat("x", 513), "", false},
	} {
		tok, ok := auth.FromHeader(c.in)
		if ok != c.ok || (ok && tok != c.tok) {
			t.Fatalf("FromHeader(%q) = %q, %v", c.in, tok, ok)
		}
	}
}

// Authentication reads the principal and its bindings in one statement;
// an unknown or revoked secret is UNAUTHENTICATED.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	f := fixture.New(t)
	acme := f.Tenant("acme")
	_, err := auth.Authenticate(f.Ctx, f.DB, "bct_nobody")
	fixture.Code(t, err, errs.Unauthenticated, "")
	if role, ok := acme.Admin.CachedRole("acme"); !ok || role != "admin" {
		t.Fatalf("bindings: %q %v", role, ok)
	}
	// Known not to hold a role on another tenant, without a statement.
	if role, ok := acme.Admin.CachedRole("beta"); !ok || role != "" {
		t.Fatalf("a tenant without a binding: %q %v", role, ok)
	}
	if tn, ok := acme.Admin.BoundTenant("acme"); !ok || tn.Name != "acme" || tn.CreatedAt.IsZero() {
		t.Fatalf("bound tenant %+v %v", tn, ok)
	}
	// Only the SHA-256 of a secret is stored.
	var secretHash []byte
	_ = f.DB.Get(&secretHash, `SELECT secret_hash FROM tokens WHERE token_id = $1`, acme.Admin.TokenID)
	if len(secretHash) != 32 {
		t.Fatalf("stored hash of %d bytes", len(secretHash))
	}
}

// EnsureOperator is idempotent and safe from many replicas at once: one
// operator principal, one bootstrap token, which exactly the last secret
// authenticates.
func TestEnsureOperator(t *testing.T) {
	t.Parallel()
	f := fixture.New(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := auth.EnsureOperator(f.Ctx, f.DB, "bco_first"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var principals, tokens int
	if err := f.DB.Get(&principals, `SELECT count(*) FROM principals WHERE kind = 'operator'`); err != nil || principals != 1 {
		t.Fatalf("%d operator principals, %v", principals, err)
	}
	p := fixture.Must(auth.Authenticate(f.Ctx, f.DB, "bco_first"))
	if !p.IsOperator() {
		t.Fatalf("principal %+v", p)
	}
	// A new secret replaces the old one on the same principal.
	fixture.Must(struct{}{}, auth.EnsureOperator(f.Ctx, f.DB, "bco_second"))
	_, err := auth.Authenticate(f.Ctx, f.DB, "bco_first")
	fixture.Code(t, err, errs.Unauthenticated, "")
	if q := fixture.Must(auth.Authenticate(f.Ctx, f.DB, "bco_second")); q.ID != p.ID {
		t.Fatalf("the operator changed: %s, was %s", q.ID, p.ID)
	}
	if err := f.DB.Get(&tokens, `SELECT count(*) FROM tokens t JOIN principals p USING (principal_id) WHERE p.kind = 'operator'`); err != nil || tokens != 1 {
		t.Fatalf("%d operator tokens, %v", tokens, err)
	}
}

// KeepOperator (the embedded default's kept token) makes the bootstrap
// token on a fresh database, but never replaces one: a restart of an
// embedded replica revived the file's token over the COMPUTE_BOOTSTRAP_TOKEN
// the other replicas were started with (which it revoked), or after the
// file's token was revoked because it leaked (a probe's).
func TestKeepOperator(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	if ok, err := auth.KeepOperator(ctx, db, "bco_file"); err != nil || !ok {
		t.Fatalf("fresh database: %v %v", ok, err)
	}
	fixture.Must(auth.Authenticate(ctx, db, "bco_file"))
	if ok, err := auth.KeepOperator(ctx, db, "bco_file"); err != nil || !ok {
		t.Fatalf("the same token again: %v %v", ok, err)
	}
	// Another replica's COMPUTE_BOOTSTRAP_TOKEN replaces it; the file's
	// token stays out.
	fixture.Must(struct{}{}, auth.EnsureOperator(ctx, db, "bco_configured"))
	if ok, err := auth.KeepOperator(ctx, db, "bco_file"); err != nil || ok {
		t.Fatalf("over a configured token: %v %v", ok, err)
	}
	_, err := auth.Authenticate(ctx, db, "bco_file")
	fixture.Code(t, err, errs.Unauthenticated, "")
	fixture.Must(auth.Authenticate(ctx, db, "bco_configured"))
	// A revoked token is not revived, even by its own secret.
	if _, err := db.Exec(`UPDATE tokens SET revoked_at = now()`); err != nil {
		t.Fatal(err)
	}
	if ok, err := auth.KeepOperator(ctx, db, "bco_configured"); err != nil || ok {
		t.Fatalf("revoked: %v %v", ok, err)
	}
	_, err = auth.Authenticate(ctx, db, "bco_configured")
	fixture.Code(t, err, errs.Unauthenticated, "")
}

// EmbeddedOperator: the first start generates the kept token (0600) and
// installs it; later starts read it back. A start whose file is gone while
// the database has a token writes none (it generated one that never
// signed in, and blamed a replacement); one whose file was replaced by a
// COMPUTE_BOOTSTRAP_TOKEN keeps the file and warns, reviving nothing.
func TestEmbeddedOperator(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	dir := t.TempDir()
	file := filepath.Join(dir, "operator-token")
	fixture.Must(struct{}{}, auth.EmbeddedOperator(ctx, db, dir, log))
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v %v", fi, err)
	}
	b, _ := os.ReadFile(file)
	s := strings.TrimSpace(string(b))
	if !strings.HasPrefix(s, "bco_") || strings.Contains(logs.String(), s) {
		t.Fatalf("generated %q; logs: %s", s, logs.String())
	}
	fixture.Must(auth.Authenticate(ctx, db, s))
	fixture.Must(struct{}{}, auth.EmbeddedOperator(ctx, db, dir, log))
	if again, _ := os.ReadFile(file); string(again) != string(b) {
		t.Fatalf("the second start generated another secret")
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Fatalf("warned: %s", logs.String())
	}
	// The file deleted: no file that would not sign in.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	fixture.Must(struct{}{}, auth.EmbeddedOperator(ctx, db, dir, log))
	if _, err := os.Stat(file); !os.IsNotExist(err) || !strings.Contains(logs.String(), "no operator token in the data directory (the file is missing or empty), and the database has an operator token") {
		t.Fatalf("a start without the file: %v; logs: %s", err, logs.String())
	}
	fixture.Must(auth.Authenticate(ctx, db, s))
	// Replaced by a configured token: the file stays out, with a warning.
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	fixture.Must(struct{}{}, auth.EnsureOperator(ctx, db, "bco_configured"))
	fixture.Must(struct{}{}, auth.EmbeddedOperator(ctx, db, dir, log))
	if !strings.Contains(logs.String(), "no longer signs in") {
		t.Fatalf("logs: %s", logs.String())
	}
	_, err = auth.Authenticate(ctx, db, s)
	fixture.Code(t, err, errs.Unauthenticated, "")
	fixture.Must(auth.Authenticate(ctx, db, "bco_configured"))
}

// OperatorCanSignIn: a database no start has bootstrapped has no operator
// who can sign in (a start without COMPUTE_BOOTSTRAP_TOKEN warns); a
// bootstrap token makes one, revoking it takes it away again.
func TestOperatorCanSignIn(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	if ok, err := auth.OperatorCanSignIn(ctx, db); err != nil || ok {
		t.Fatalf("fresh database: %v %v", ok, err)
	}
	fixture.Must(struct{}{}, auth.EnsureOperator(ctx, db, "bco_first"))
	if ok, err := auth.OperatorCanSignIn(ctx, db); err != nil || !ok {
		t.Fatalf("after the bootstrap: %v %v", ok, err)
	}
	if _, err := db.Exec(`UPDATE tokens SET revoked_at = now()`); err != nil {
		t.Fatal(err)
	}
	if ok, err := auth.OperatorCanSignIn(ctx, db); err != nil || ok {
		t.Fatalf("revoked: %v %v", ok, err)
	}
}
