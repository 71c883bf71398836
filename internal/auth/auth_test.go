package auth_test

import (
	"context"
	"io"
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

func TestBootstrapSecret(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	if s, err := auth.BootstrapSecret("configured", dir, true, log); s != "configured" || err != nil {
		t.Fatalf("configured: %q %v", s, err)
	}
	if s, err := auth.BootstrapSecret("", dir, false, log); s != "" || err != nil {
		t.Fatalf("not embedded: %q %v", s, err)
	}
	s, err := auth.BootstrapSecret("", dir, true, log)
	if err != nil || !strings.HasPrefix(s, "bco_") {
		t.Fatalf("generated: %q %v", s, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "operator-token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v %v", fi, err)
	}
	if again, _ := auth.BootstrapSecret("", dir, true, log); again != s {
		t.Fatalf("the second start generated another secret")
	}
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
