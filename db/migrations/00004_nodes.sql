-- +goose Up
-- Joins and nodes: join tokens on pools, the machines the discovery attestor
-- expects, the TPM endorsement keys a pool allows, the approval queue of
-- deferred joins, the nodes themselves and their append-only inventory.

CREATE TABLE join_tokens (
    join_token_id text COLLATE "C" PRIMARY KEY,
    pool_id       text COLLATE "C" NOT NULL REFERENCES pools (pool_id),
    tenant_id     text NOT NULL REFERENCES tenants (tenant_id),
    secret_hash   bytea NOT NULL,
    max_uses      integer NOT NULL CHECK (max_uses >= 1),
    uses          integer NOT NULL DEFAULT 0 CHECK (uses >= 0 AND uses <= max_uses),
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    CONSTRAINT join_tokens_secret_hash_key UNIQUE (secret_hash)
);
CREATE INDEX join_tokens_pool_idx ON join_tokens (pool_id, join_token_id);

-- Machines the pool owner registered for the discovery attestor: a join is
-- admitted when any of the machine's ids matches one of these rows.
CREATE TABLE expected_machines (
    machine_id  text COLLATE "C" PRIMARY KEY,
    pool_id     text COLLATE "C" NOT NULL REFERENCES pools (pool_id),
    system_uuid text,
    serial      text,
    mac         text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT expected_machines_some_id CHECK (system_uuid IS NOT NULL OR serial IS NOT NULL OR mac IS NOT NULL)
);
CREATE INDEX expected_machines_pool_idx ON expected_machines (pool_id, machine_id);
CREATE INDEX expected_machines_uuid_idx ON expected_machines (pool_id, system_uuid) WHERE system_uuid IS NOT NULL;
CREATE INDEX expected_machines_serial_idx ON expected_machines (pool_id, serial) WHERE serial IS NOT NULL;
CREATE INDEX expected_machines_mac_idx ON expected_machines (pool_id, mac) WHERE mac IS NOT NULL;

-- The TPM attestor's allow-list: SHA-256 (hex) of endorsement public keys.
CREATE TABLE tpm_allowed_keys (
    pool_id     text COLLATE "C" NOT NULL REFERENCES pools (pool_id),
    ek_hash     text COLLATE "C" NOT NULL CHECK (ek_hash ~ '^[0-9a-f]{64}$'),
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_id, ek_hash)
);

CREATE TABLE nodes (
    node_id            text COLLATE "C" PRIMARY KEY,
    tenant_id          text NOT NULL REFERENCES tenants (tenant_id),
    pool_id            text COLLATE "C" NOT NULL REFERENCES pools (pool_id),
    name               text NOT NULL,
    labels             jsonb NOT NULL DEFAULT '{}',
    state              text NOT NULL DEFAULT 'ready' CHECK (state IN ('ready', 'cordoned', 'removed')),
    attestor           text NOT NULL CHECK (attestor IN ('token', 'discovery', 'tpm')),
    system_uuid        text,
    serial             text,
    macs               text[] NOT NULL DEFAULT '{}',
    csr_fingerprint    text COLLATE "C" NOT NULL,
    certificate        text NOT NULL,
    cert_expires_at    timestamptz NOT NULL,
    principal_id       text REFERENCES principals (principal_id),
    join_request_id    text COLLATE "C",
    latest_snapshot_id text COLLATE "C",
    row_version        integer NOT NULL DEFAULT 1,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    removed_at         timestamptz
);
CREATE INDEX nodes_pool_idx ON nodes (pool_id, node_id);
CREATE INDEX nodes_tenant_idx ON nodes (tenant_id, node_id);
CREATE INDEX nodes_labels_idx ON nodes USING gin (labels jsonb_path_ops);
-- One live node per machine key pair.
CREATE UNIQUE INDEX nodes_csr_fingerprint_key ON nodes (csr_fingerprint) WHERE state <> 'removed';

-- Deferred joins. A pending or approved request past expires_at reads as
-- expired; an approved one is consumed by the machine's retry with the same
-- CSR (csr_fingerprint), which admits exactly one node.
CREATE TABLE join_requests (
    join_request_id text COLLATE "C" PRIMARY KEY,
    pool_id         text COLLATE "C" NOT NULL REFERENCES pools (pool_id),
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    join_token_id   text COLLATE "C" NOT NULL REFERENCES join_tokens (join_token_id),
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'approved', 'consumed', 'denied', 'expired')),
    attestor        text NOT NULL CHECK (attestor IN ('token', 'discovery', 'tpm')),
    reasons         jsonb NOT NULL,
    csr_fingerprint text COLLATE "C" NOT NULL,
    hardware        jsonb NOT NULL,
    ek_hash         text,
    node_id         text COLLATE "C" REFERENCES nodes (node_id),
    decided_by      text,
    decided_at      timestamptz,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX join_requests_pool_idx ON join_requests (pool_id, join_request_id);
CREATE INDEX join_requests_fingerprint_idx ON join_requests (pool_id, csr_fingerprint);
-- At most one open request per machine key pair and pool.
CREATE UNIQUE INDEX join_requests_open_key ON join_requests (pool_id, csr_fingerprint) WHERE state IN ('pending', 'approved');

-- Inventory snapshots: append-only; a row is never updated. sections holds
-- the RFC 8785 canonical JSON the hash was computed over, byte for byte.
CREATE TABLE inventory_snapshots (
    snapshot_id  text COLLATE "C" PRIMARY KEY,
    node_id      text COLLATE "C" NOT NULL REFERENCES nodes (node_id),
    hash         text COLLATE "C" NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    sections     json NOT NULL,
    collected_at timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inventory_snapshots_node_idx ON inventory_snapshots (node_id, snapshot_id DESC);
CREATE INDEX inventory_snapshots_hash_idx ON inventory_snapshots (node_id, hash);

-- +goose StatementBegin
CREATE FUNCTION inventory_snapshots_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'inventory snapshots are append-only';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER inventory_snapshots_no_update BEFORE UPDATE ON inventory_snapshots
    FOR EACH ROW EXECUTE FUNCTION inventory_snapshots_append_only();

-- +goose Down
DROP TABLE inventory_snapshots;
DROP FUNCTION inventory_snapshots_append_only();
DROP TABLE join_requests;
DROP TABLE nodes;
DROP TABLE tpm_allowed_keys;
DROP TABLE expected_machines;
DROP TABLE join_tokens;
