-- +goose Up
-- Instances (VMs in VPS pools), their GPU allocations on hosts, reservations,
-- the instance event outbox with its retention mark, and the sim provider's
-- VMs.

CREATE TABLE instances (
    instance_id         text COLLATE "C" PRIMARY KEY,
    tenant_id           text NOT NULL REFERENCES tenants (tenant_id),
    pool_id             text COLLATE "C" NOT NULL REFERENCES pools (pool_id),
    project_id          text REFERENCES projects (project_id) ON DELETE SET NULL,
    name                text NOT NULL,
    gpus                integer NOT NULL CHECK (gpus >= 0),
    gpu_profile         text,
    vcpus               integer NOT NULL CHECK (vcpus >= 1),
    memory_gib          integer NOT NULL CHECK (memory_gib >= 1),
    image               text,
    desired_state       text NOT NULL CHECK (desired_state IN ('running', 'stopped', 'deleted')),
    -- When a desired-state call last changed the instance: a failed instance
    -- is left only by a start or delete made after it failed.
    desired_at          timestamptz NOT NULL DEFAULT now(),
    state               text NOT NULL DEFAULT 'pending' CHECK (state IN
                            ('pending', 'provisioning', 'running', 'stopping', 'stopped', 'rebooting', 'deleting', 'deleted', 'failed')),
    state_reason        text,
    state_since         timestamptz NOT NULL DEFAULT now(),
    -- Tries of the current step (reset on every state move).
    step_tries          integer NOT NULL DEFAULT 0,
    reboot_generation   integer NOT NULL DEFAULT 0,
    rebooted_generation integer NOT NULL DEFAULT 0,
    host_node_id        text COLLATE "C" REFERENCES nodes (node_id),
    client_token        text,
    request_hash        text,
    row_version         integer NOT NULL DEFAULT 1,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    deleted_at          timestamptz,
    -- Whether the instance is where its desired state wants it; the
    -- reconciler's sweep looks at the others only.
    converged           boolean GENERATED ALWAYS AS (
        state = 'deleted'
        OR (state = 'failed' AND (desired_at <= state_since OR desired_state = 'stopped'))
        OR (state = 'running' AND desired_state = 'running' AND reboot_generation <= rebooted_generation)
        OR (state = 'stopped' AND desired_state = 'stopped')
    ) STORED,
    CONSTRAINT instances_deleted_check CHECK ((state = 'deleted') = (deleted_at IS NOT NULL)),
    CONSTRAINT instances_reboot_check CHECK (rebooted_generation <= reboot_generation)
);
CREATE INDEX instances_tenant_idx ON instances (tenant_id, instance_id);
CREATE INDEX instances_pool_idx ON instances (pool_id, tenant_id) WHERE state <> 'deleted';
CREATE INDEX instances_host_idx ON instances (host_node_id, instance_id) WHERE host_node_id IS NOT NULL;
CREATE INDEX instances_unconverged_idx ON instances (instance_id) WHERE NOT converged;
CREATE UNIQUE INDEX instances_client_token_key ON instances (tenant_id, client_token) WHERE client_token IS NOT NULL;
-- A live instance's name is unique in its tenant (GCE-style); a deleted one
-- frees its name.
CREATE UNIQUE INDEX instances_tenant_name_key ON instances (tenant_id, name) WHERE state <> 'deleted';

-- The backstop of the transition table in internal/instances/states.go: a
-- state move the table does not allow is refused by the database too.
-- +goose StatementBegin
CREATE FUNCTION instances_transition_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state AND NOT (
        (OLD.state = 'pending'      AND NEW.state IN ('provisioning', 'deleted', 'failed')) OR
        (OLD.state = 'provisioning' AND NEW.state IN ('running', 'deleting', 'failed')) OR
        (OLD.state = 'running'      AND NEW.state IN ('stopping', 'rebooting', 'deleting', 'failed')) OR
        (OLD.state = 'stopping'     AND NEW.state IN ('stopped', 'deleting', 'failed')) OR
        (OLD.state = 'stopped'      AND NEW.state IN ('provisioning', 'deleting', 'failed')) OR
        (OLD.state = 'rebooting'    AND NEW.state IN ('running', 'deleting', 'failed')) OR
        (OLD.state = 'deleting'     AND NEW.state IN ('deleted', 'failed')) OR
        (OLD.state = 'failed'       AND NEW.state IN ('provisioning', 'deleting'))
    ) THEN
        RAISE EXCEPTION 'instance % cannot move from % to %', OLD.instance_id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state = 'pending' AND TG_OP = 'UPDATE' AND OLD.state <> 'pending' THEN
        RAISE EXCEPTION 'instance % cannot return to pending', OLD.instance_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER instances_transition BEFORE UPDATE OF state ON instances
    FOR EACH ROW EXECUTE FUNCTION instances_transition_check();

-- GPU devices held by instances on hosts: a whole GPU (exclusive), a MIG
-- device (mig) or one slice of a GPU (time-sliced). The primary key is what
-- makes placement atomic: two instances never hold the same device.
CREATE TABLE instance_allocations (
    node_id     text COLLATE "C" NOT NULL REFERENCES nodes (node_id),
    device_id   text COLLATE "C" NOT NULL,
    instance_id text COLLATE "C" NOT NULL REFERENCES instances (instance_id),
    gpu_uuid    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, device_id)
);
CREATE INDEX instance_allocations_instance_idx ON instance_allocations (instance_id);

-- Reservations: capacity held in one pool for [starts_at, ends_at).
CREATE TABLE reservations (
    reservation_id text COLLATE "C" PRIMARY KEY,
    tenant_id      text NOT NULL REFERENCES tenants (tenant_id),
    pool_id        text COLLATE "C" NOT NULL REFERENCES pools (pool_id),
    gpus           integer NOT NULL CHECK (gpus >= 0),
    vcpus          integer NOT NULL CHECK (vcpus >= 0),
    memory_gib     integer NOT NULL CHECK (memory_gib >= 0),
    starts_at      timestamptz NOT NULL,
    ends_at        timestamptz NOT NULL,
    state          text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'canceled')),
    row_version    integer NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    canceled_at    timestamptz,
    CONSTRAINT reservations_window_check CHECK (ends_at > starts_at),
    CONSTRAINT reservations_canceled_check CHECK ((state = 'canceled') = (canceled_at IS NOT NULL))
);
CREATE INDEX reservations_tenant_idx ON reservations (tenant_id, reservation_id);
CREATE INDEX reservations_pool_idx ON reservations (pool_id, ends_at) WHERE state = 'active';

-- The instance event outbox. Stream order is (xid, seq); readers only read
-- below the visibility horizon pg_snapshot_xmin(pg_current_snapshot()), so a
-- reader never later finds a newly committed event that sorts before one it
-- has seen (internal/events).
CREATE TABLE instance_events (
    seq           bigint GENERATED ALWAYS AS IDENTITY,
    xid           xid8 NOT NULL DEFAULT pg_current_xact_id(),
    tenant_id     text NOT NULL,
    pool_id       text COLLATE "C" NOT NULL,
    instance_id   text COLLATE "C" NOT NULL,
    project_id    text,
    type          text NOT NULL CHECK (type IN ('instance.created', 'instance.provisioning', 'instance.running',
                      'instance.stopping', 'instance.stopped', 'instance.rebooting', 'instance.deleting',
                      'instance.deleted', 'instance.failed')),
    state         text NOT NULL,
    desired_state text NOT NULL,
    state_reason  text,
    occurred_at   timestamptz NOT NULL DEFAULT now(),
    instance      jsonb NOT NULL,
    PRIMARY KEY (xid, seq)
);
CREATE INDEX instance_events_tenant_idx ON instance_events (tenant_id, xid, seq);
CREATE INDEX instance_events_instance_idx ON instance_events (instance_id, xid, seq);
CREATE INDEX instance_events_pool_idx ON instance_events (pool_id, xid, seq);
CREATE INDEX instance_events_time_idx ON instance_events (occurred_at);

-- How far retention has pruned the stream: a cursor before this position
-- may have missed pruned events (expired-cursor).
CREATE TABLE instance_events_pruned (
    id        boolean PRIMARY KEY DEFAULT true CHECK (id),
    xid       xid8 NOT NULL,
    seq       bigint NOT NULL,
    pruned_at timestamptz NOT NULL DEFAULT now()
);

-- The sim provider's VMs (internal/instances/provider/sim): kept in
-- PostgreSQL so that every replica sees the same simulated cloud.
CREATE TABLE sim_vms (
    vm_id      text COLLATE "C" PRIMARY KEY,
    pool_id    text COLLATE "C" NOT NULL,
    gpus       integer NOT NULL,
    state      text NOT NULL CHECK (state IN ('provisioning', 'running', 'stopping', 'stopped', 'rebooting', 'deleting', 'deleted')),
    ready_at   timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sim_vms_pool_idx ON sim_vms (pool_id) WHERE state <> 'deleted';

-- +goose Down
DROP TABLE sim_vms;
DROP TABLE instance_events_pruned;
DROP TABLE instance_events;
DROP TABLE reservations;
DROP TABLE instance_allocations;
DROP TABLE instances;
DROP FUNCTION instances_transition_check();
