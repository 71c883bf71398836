-- +goose Up
-- Pools: the nodes of one site under one GPU model, sharing mode and policy.
-- The tenant that creates a pool owns it; offers make it visible to other
-- tenants with a quota (owner and offered-to relationships on
-- compute-pool/{poolId}).

CREATE TABLE pools (
    pool_id          text COLLATE "C" PRIMARY KEY,
    tenant_id        text NOT NULL REFERENCES tenants (tenant_id),
    name             text NOT NULL,
    site             text NOT NULL,
    gpu_model        text NOT NULL,
    sharing_mode     text NOT NULL CHECK (sharing_mode IN ('exclusive', 'mig', 'time-sliced')),
    kind             text NOT NULL CHECK (kind IN ('bare-metal', 'vps-hosted', 'vps-provider')),
    provider         text,
    provider_account text,
    policy           jsonb NOT NULL DEFAULT '{}',
    state            text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'archived')),
    row_version      integer NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pools_tenant_name_key UNIQUE (tenant_id, name),
    CONSTRAINT pools_provider_kind_check CHECK (provider IS NULL OR kind = 'vps-provider')
);
CREATE INDEX pools_tenant_idx ON pools (tenant_id, pool_id);

-- Offers: the owner makes a pool visible to another tenant with a quota.
CREATE TABLE pool_offers (
    pool_id         text COLLATE "C" NOT NULL REFERENCES pools (pool_id) ON DELETE CASCADE,
    to_tenant_id    text NOT NULL REFERENCES tenants (tenant_id),
    quota_gpus      integer NOT NULL CHECK (quota_gpus >= 0),
    quota_instances integer NOT NULL CHECK (quota_instances >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool_id, to_tenant_id)
);
CREATE INDEX pool_offers_to_tenant_idx ON pool_offers (to_tenant_id, pool_id);

-- +goose Down
DROP TABLE pool_offers;
DROP TABLE pools;
