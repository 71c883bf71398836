package db_test

import (
	"context"
	"testing"
)

// TestMachinesMigrationKeepsTheFirst: migration 00024 keeps the first of
// the expected machines registered more than once with the same ids (each
// of systemUuid, serial and mac the same, given or not), and no other.
func TestMachinesMigrationKeepsTheFirst(t *testing.T) {
	ctx := context.Background()
	d, p := migratedTo(t, "machines_once", 23)
	for _, stmt := range []string{
		`INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme')`,
		`INSERT INTO pools (pool_id, tenant_id, name, site, gpu_model, sharing_mode, kind) VALUES
			('pool_a', 'acme', 'a', 's', 'g', 'exclusive', 'bare-metal'), ('pool_b', 'acme', 'b', 's', 'g', 'exclusive', 'bare-metal')`,
		`INSERT INTO expected_machines (machine_id, pool_id, system_uuid, serial, mac) VALUES
			('m1', 'pool_a', NULL, 'SN1', '02:00:00:00:00:01'),
			('m2', 'pool_a', NULL, 'SN1', '02:00:00:00:00:01'),
			('m3', 'pool_a', NULL, 'SN1', '02:00:00:00:00:01'),
			('m4', 'pool_a', NULL, 'SN1', NULL),
			('m5', 'pool_b', NULL, 'SN1', '02:00:00:00:00:01'),
			('m6', 'pool_a', 'u', NULL, NULL),
			('m7', 'pool_a', 'u', NULL, NULL)`,
	} {
		if _, err := d.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var kept string
	if err := d.QueryRowContext(ctx, `SELECT string_agg(machine_id, ',' ORDER BY machine_id) FROM expected_machines`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != "m1,m4,m5,m6" {
		t.Fatalf("kept %s, want m1,m4,m5,m6", kept)
	}
}
