package db_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/bettercompute/computed/db"
	"github.com/bettercompute/computed/internal/testkit"
)

// TestAuditMigrationDerivesTenants: migration 00012 gives the records
// written before it their tenant where it can be derived, and the platform
// ('@platform') where it cannot, as docs/design.md says.
// migratedTo makes a database of its own, name, on the tests' cluster,
// migrated up to version, and the provider that migrates it further.
func migratedTo(t *testing.T, name string, version int64) (*sql.DB, *goose.Provider) {
	t.Helper()
	c := testkit.Cluster(t)
	admin, err := sql.Open("pgx", c.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatal(err)
	}
	d, err := sql.Open("pgx", strings.Replace(c.AdminURL(), "/postgres?", "/"+name+"?", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, d, db.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
	return d, p
}

func TestAuditMigrationDerivesTenants(t *testing.T) {
	ctx := context.Background()
	d, p := migratedTo(t, "audit_backfill", 11)
	for _, stmt := range []string{
		`INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme'), ('evil', 'Evil')`,
		`INSERT INTO principals (principal_id, kind, tenant_id, name) VALUES
			('prn_op', 'operator', NULL, 'operator'), ('prn_member', 'service', 'acme', 'dev'), ('prn_evil', 'service', 'evil', 'mallory')`,
		`INSERT INTO role_bindings (tenant_id, principal_id, role) VALUES ('acme', 'prn_member', 'member'), ('evil', 'prn_evil', 'admin')`,
		`INSERT INTO projects (project_id, tenant_id, name) VALUES ('prj_web', 'acme', 'web')`,
		`INSERT INTO audit_log (audit_id, principal_id, method, resource, outcome, request_id) VALUES
			('aud_1', 'prn_op', 'tenants.create', 'platform', 'ok', 'r1'),
			('aud_2', 'prn_member', 'projects.create', 'compute-project/prj_web', 'ok', 'r2'),
			('aud_3', 'prn_member', 'profiles.create', 'compute-profile/acme/gpu-base', 'ok', 'r3'),
			('aud_4', 'prn_evil', 'projects.delete', 'compute-project/prj_web', 'PERMISSION_DENIED', 'r4'),
			('aud_5', 'prn_member', 'projects.update', 'compute-project/prj_web', 'CONFLICT', 'r5'),
			('aud_6', 'prn_evil', 'projects.create', 'compute-tenant/acme', 'PERMISSION_DENIED', 'r6'),
			('aud_7', 'prn_evil', 'projects.create', 'compute-tenant/ghost', 'PERMISSION_DENIED', 'r7'),
			('aud_8', NULL, 'nodes.join', 'compute-pool/', 'UNAUTHENTICATED', 'r8'),
			('aud_9', 'prn_op', 'projects.delete', 'compute-project/prj_gone', 'ok', 'r9'),
			('aud_10', 'prn_member', 'projects.delete', 'compute-project/prj_gone', 'ok', 'r10'),
			('aud_11', 'system:vps.instances', 'vps.instances.running', 'compute-instance/inst_gone', 'ok', 'job-1')`,
	} {
		if _, err := d.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"aud_1":  "@platform|operator|operator|platform||success", // the old record did not say which tenant
		"aud_2":  "acme|service|dev|compute-project|prj_web|success",
		"aud_3":  "acme|service|dev|compute-profile|gpu-base|success",
		"aud_4":  "evil|service|mallory|compute-project|prj_web|PERMISSION_DENIED", // no role on acme: its own tenant
		"aud_5":  "acme|service|dev|compute-project|prj_web|CONFLICT",
		"aud_6":  "acme|service|mallory|compute-tenant|acme|PERMISSION_DENIED",
		"aud_7":  "@platform|service|mallory|compute-tenant|ghost|PERMISSION_DENIED",
		"aud_8":  "@platform|join-token|join token|compute-pool||UNAUTHENTICATED",
		"aud_9":  "@platform|operator|operator|compute-project|prj_gone|success",
		"aud_10": "acme|service|dev|compute-project|prj_gone|success",
		"aud_11": "@platform|system|vps.instances reconciler|compute-instance|inst_gone|success",
	}
	rows, err := d.QueryContext(ctx, `SELECT audit_id, tenant_id || '|' || principal_kind || '|' || principal_name || '|' ||
		resource_type || '|' || resource_id || '|' || outcome FROM audit_log`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, got string
		if err := rows.Scan(&id, &got); err != nil {
			t.Fatal(err)
		}
		n++
		if w := want[id]; got != w {
			t.Errorf("%s: %s, want %s", id, got, want[id])
		}
	}
	if n != len(want) {
		t.Fatalf("%d records after the migration, want %d", n, len(want))
	}
	// and from here on they cannot change
	if _, err := d.ExecContext(ctx, `UPDATE audit_log SET tenant_id = 'acme'`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("an update after the migration: %v", err)
	}
	// the migration goes down and up again
	if _, err := p.DownTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	var resource string
	if err := d.QueryRowContext(ctx, `SELECT resource FROM audit_log WHERE audit_id = 'aud_3'`).Scan(&resource); err != nil || resource != "compute-profile/acme/gpu-base" {
		t.Fatalf("down: %q %v", resource, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
}
