package profiles_test

import (
	"io/fs"
	"strings"
	"testing"

	computedb "github.com/bettercompute/computed/db"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

// Migration 00014 on data stored before it: public versions of an id a
// module ships become private, and an id several tenants publish stays
// with its first publisher, the others' versions becoming private. Its
// Down part is run, the old data stored, then its Up part again.
func TestMigrationKeepsOnePublisher(t *testing.T) {
	e := newEnv(t)
	e.F.Tenant("gamma")
	raw, err := fs.ReadFile(computedb.Migrations(), "00014_profile_public_ids.sql")
	if err != nil {
		t.Fatal(err)
	}
	up, down, ok := strings.Cut(string(raw), "-- +goose Down")
	if !ok {
		t.Fatal("no Down part")
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := e.DB.ExecContext(e.Ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	exec(down)
	for _, r := range []struct {
		tenant, id string
		version    int
		vis        string
		age        string
	}{
		{"beta", "shared", 1, "public", "3 days"}, // first published
		{"acme", "shared", 1, "public", "2 days"},
		{"acme", "shared", 2, "public", "1 day"},
		{"gamma", "shared", 1, "private", "4 days"},
		{"beta", "rocky-9-base", 1, "public", "1 day"},
		{"acme", "mine", 1, "public", "1 day"},
	} {
		exec(`INSERT INTO profiles (tenant_id, profile_id, profile_version, visibility, document, created_at)
			VALUES ($1, $2, $3, $4, $5::jsonb, now() - $6::interval)`, r.tenant, r.id, r.version, r.vis, string(doc(r.id, r.version)), r.age)
	}
	exec(up)

	vis := func(tenant, id string, version int) string {
		var v string
		if err := e.DB.GetContext(e.Ctx, &v, `SELECT visibility FROM profiles WHERE tenant_id = $1 AND profile_id = $2 AND profile_version = $3`,
			tenant, id, version); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		tenant, id string
		version    int
		want       string
	}{
		{"beta", "shared", 1, "public"}, {"acme", "shared", 1, "private"}, {"acme", "shared", 2, "private"},
		{"gamma", "shared", 1, "private"}, {"beta", "rocky-9-base", 1, "private"}, {"acme", "mine", 1, "public"},
	} {
		if got := vis(c.tenant, c.id, c.version); got != c.want {
			t.Fatalf("%s's %s v%d: %s, want %s", c.tenant, c.id, c.version, got, c.want)
		}
	}
	// The claims the migration wrote hold: the first publisher keeps
	// publishing, the others are refused, and every lookup of a shipped id
	// finds the shipped profile.
	e.create("beta", "shared", 2, profiles.Public)
	_, err = profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "acme", ProfileID: "shared", ProfileVersion: 1, Visibility: fixture.Ptr(profiles.Public)})
	fixture.Code(t, err, errs.Conflict, "visibility")
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("gamma", "rocky-9-base", 0))); !p.Shipped() {
		t.Fatalf("gamma's lookup of rocky-9-base: %s's", p.TenantID)
	}
}
