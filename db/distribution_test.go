package db_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// The road past one PostgreSQL (docs/scaling.md) distributes tenant data by
// tenant_id: a table is distributable when it has tenant_id, every primary
// and unique key includes it, and every foreign key to another tenant table
// includes it on both sides (co-located). The tables below are not yet; the
// list can only shrink: a new table must be distributable (or be one of
// notTenantData, with its reason), and a table that became distributable
// must leave the list.
var notYetDistributable = map[string]string{
	"expected_machines":    "no tenant_id (the pool owner's)",
	"instance_allocations": "no tenant_id; instance and host node belong to different tenants in offered pools",
	"instances":            "keyed by instance_id; pool_id, host_node_id, project_id foreign keys without tenant_id (offered pools cross tenants)",
	"inventory_snapshots":  "no tenant_id (the node owner's)",
	"join_requests":        "keyed by join_request_id; join_requests_open_key (pool_id, csr_fingerprint)",
	"join_tokens":          "keyed by join_token_id; join_tokens_secret_hash_key (secret_hash)",
	"nodes":                "keyed by node_id; nodes_csr_fingerprint_key (csr_fingerprint)",
	"pool_offers":          "no tenant_id: the owner's pool offered to another tenant",
	"pools":                "keyed by pool_id",
	"principals":           "keyed by principal_id; the operator has no tenant",
	"project_relations":    "no tenant_id",
	"projects":             "keyed by project_id",
	"reservations":         "keyed by reservation_id",
	"role_bindings":        "principal_id foreign key without tenant_id (a principal may hold a role on another tenant)",
	"tokens":               "keyed by token_id; tokens_secret_hash_key (secret_hash)",
	"tpm_allowed_keys":     "no tenant_id (the pool owner's)",
	"workflows":            "keyed by workflow_id; workflows_node_active_key (node_id)",
}

// notTenantData are tables that hold no tenant's data: reference tables
// (copied to every node), tables local to the coordinator, or tables
// distributed by a key of their own (docs/scaling.md says which).
var notTenantData = map[string]string{
	"cluster_leases":     "local: the maintenance lease",
	"goose_db_version":   "local: the migrations applied",
	"public_profile_ids": "reference: a public profile id belongs to one tenant across all of them (like csr_claims)",
	"rate_buckets":       "distributed by its own key (scope, key): credentials and addresses, not tenants",
	"river_job":          "local: the job queue stays on the coordinator",
	"river_leader":       "local",
	"river_migration":    "local",
	"river_notification": "local",
	"river_queue":        "local",
	"server_secrets":     "reference: the node CA, read by every node",
	"sim_vms":            "the simulated cloud's own state (an outside system's stand-in): distributed by vm_id",
}

func TestTablesNotYetDistributable(t *testing.T) {
	d := testkit.DB(t)
	// For each table: has tenant_id; its unique keys without tenant_id;
	// its foreign keys without tenant_id on both sides, with the table
	// they reference.
	rows, err := d.Query(`
		SELECT c.relname,
		       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped),
		       coalesce((SELECT string_agg(i.indexrelid::regclass::text, ',') FROM pg_index i
		                 WHERE i.indrelid = c.oid AND (i.indisunique OR i.indisprimary)
		                   AND NOT EXISTS (SELECT 1 FROM unnest(i.indkey) k JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k
		                                   WHERE a.attname = 'tenant_id')), ''),
		       coalesce((SELECT string_agg(f.conname || '>' || f.confrelid::regclass::text, ',') FROM pg_constraint f
		                 WHERE f.contype = 'f' AND f.conrelid = c.oid
		                   AND NOT (EXISTS (SELECT 1 FROM unnest(f.conkey) k JOIN pg_attribute a ON a.attrelid = f.conrelid AND a.attnum = k WHERE a.attname = 'tenant_id')
		                        AND EXISTS (SELECT 1 FROM unnest(f.confkey) k JOIN pg_attribute a ON a.attrelid = f.confrelid AND a.attnum = k WHERE a.attname = 'tenant_id'))), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	var problems []string
	for rows.Next() {
		var name, keys, fks string
		var tenant bool
		if err := rows.Scan(&name, &tenant, &keys, &fks); err != nil {
			t.Fatal(err)
		}
		seen[name] = true
		if _, ok := notTenantData[name]; ok {
			continue
		}
		var why []string
		if !tenant {
			why = append(why, "no tenant_id column")
		}
		if keys != "" {
			why = append(why, "keys without tenant_id: "+keys)
		}
		for _, fk := range strings.Split(fks, ",") {
			if fk == "" {
				continue
			}
			ref := fk[strings.Index(fk, ">")+1:]
			if _, refOK := notTenantData[ref]; !refOK {
				why = append(why, "foreign key without tenant_id: "+fk)
			}
		}
		_, listed := notYetDistributable[name]
		switch {
		case len(why) > 0 && !listed:
			problems = append(problems, name+" is not distributable by tenant ("+strings.Join(why, "; ")+"): put tenant_id in its keys and foreign keys (docs/scaling.md)")
		case len(why) == 0 && listed:
			problems = append(problems, name+" is distributable now: remove it from notYetDistributable (the list only shrinks)")
		}
	}
	for _, list := range []map[string]string{notYetDistributable, notTenantData} {
		for name := range list {
			if !seen[name] {
				problems = append(problems, name+" no longer exists: remove it from the list")
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}
