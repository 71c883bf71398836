-- +goose Up
-- Token buckets shared by the replicas (internal/ratelimit): one row per
-- limit and key (a credential, a client address). Replicas lease tokens
-- from a row in batches and spend them locally, so a request does not pay
-- a round trip. Unlogged: the buckets are no data worth a WAL flush, and
-- after a crash of PostgreSQL they start full again, which a restart of
-- every replica would do too.
CREATE UNLOGGED TABLE rate_buckets (
    scope   text COLLATE "C" NOT NULL,
    key     text COLLATE "C" NOT NULL,
    -- Tokens left at "at" (fractional: the refill is continuous).
    tokens  double precision NOT NULL,
    -- What the last lease took (RETURNING sees only the new row).
    granted integer NOT NULL DEFAULT 0,
    at      timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);
-- A bucket untouched for longer than it takes to refill is full, the same
-- as no row: the maintenance lease's holder deletes those.
CREATE INDEX rate_buckets_at_idx ON rate_buckets (at);

-- Leases on the cluster's periodic duties (internal/cluster): the sweep,
-- the rescue of dead replicas' jobs, pruning. One replica at a time holds a
-- lease, renewing it before it expires; a dead holder's lease is taken over
-- once it expires.
CREATE TABLE cluster_leases (
    name       text COLLATE "C" PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The reconciler's sweep looks only at nodes removed since its last run.
CREATE INDEX nodes_removed_idx ON nodes (removed_at) WHERE state = 'removed';

-- +goose Down
DROP INDEX nodes_removed_idx;
DROP TABLE cluster_leases;
DROP TABLE rate_buckets;
