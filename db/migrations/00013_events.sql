-- +goose Up
-- One event stream per tenant (issue 17), for every resource a dashboard
-- watches, replacing the instance event outbox.
--
-- The old outbox ordered events by (xid, seq) and read only below the
-- cluster's oldest running transaction, so any open transaction anywhere
-- in the PostgreSQL cluster froze every tenant's stream; its writers
-- notified in their own transaction (the database-wide notify lock); and
-- its sequence counted every tenant's events.
--
-- Now a writer inserts into event_inbox in its own transaction, with no
-- lock, notify or counter shared with anyone: rows carry the writer's xid
-- and the order of the write within its transaction. After commit a
-- sequencer (internal/events) moves committed inbox rows of a tenant into
-- events, numbering them after that tenant's last_seq under the lock of
-- the tenant's event_streams row, and commits. Sequencers of one tenant
-- take turns on that row, so the numbers a tenant's readers can see are
-- always 1..last_seq with no hole: a reader never later finds an event
-- that sorts before one it has seen, whatever else runs in the cluster.
-- Every key leads with tenant_id, so the three tables distribute by tenant.
CREATE TABLE event_streams (
    tenant_id  text PRIMARY KEY,
    last_seq   bigint NOT NULL DEFAULT 0,
    -- every event with seq <= pruned_seq may be gone (retention): a cursor
    -- before it is expired
    pruned_seq bigint NOT NULL DEFAULT 0
);

CREATE TABLE event_inbox (
    tenant_id     text NOT NULL,
    xid           xid8 NOT NULL DEFAULT pg_current_xact_id(),
    ord           bigint NOT NULL,
    type          text NOT NULL,
    resource_type text NOT NULL,
    resource_id   text COLLATE "C" NOT NULL,
    pool_id       text COLLATE "C",
    data          jsonb NOT NULL,
    occurred_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, xid, ord)
);

CREATE TABLE events (
    tenant_id     text NOT NULL,
    seq           bigint NOT NULL,
    type          text NOT NULL CHECK (type ~ '^[a-z][A-Za-z]*\.[a-z][A-Za-z]*$'),
    resource_type text NOT NULL CHECK (resource_type IN ('instance', 'node', 'joinRequest', 'workflow', 'reservation')),
    resource_id   text COLLATE "C" NOT NULL,
    pool_id       text COLLATE "C",
    data          jsonb NOT NULL,
    occurred_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX events_resource_idx ON events (resource_id, seq);
CREATE INDEX events_pool_idx ON events (tenant_id, pool_id, seq) WHERE pool_id IS NOT NULL;
CREATE INDEX events_time_idx ON events (occurred_at);

-- The instance events so far, in their old stream order, numbered per
-- tenant. Their data is the instance as of the event.
INSERT INTO events (tenant_id, seq, type, resource_type, resource_id, pool_id, data, occurred_at)
SELECT tenant_id, row_number() OVER (PARTITION BY tenant_id ORDER BY xid, seq), type, 'instance', instance_id, pool_id,
       instance, occurred_at
FROM instance_events;
INSERT INTO event_streams (tenant_id, last_seq)
SELECT tenant_id, max(seq) FROM events GROUP BY tenant_id;

DROP TABLE instance_events_pruned;
DROP TABLE instance_events;

-- A reservation's end is not a write (reads show it expired from then on):
-- the maintenance lease's holder writes its reservation.expired event once
-- and marks it here. Reservations that ended before this migration get none.
ALTER TABLE reservations ADD COLUMN expiry_announced boolean NOT NULL DEFAULT false;
UPDATE reservations SET expiry_announced = true WHERE ends_at <= now();

-- +goose Down
ALTER TABLE reservations DROP COLUMN expiry_announced;
CREATE TABLE instance_events (
    seq           bigint GENERATED ALWAYS AS IDENTITY,
    xid           xid8 NOT NULL DEFAULT pg_current_xact_id(),
    tenant_id     text NOT NULL,
    pool_id       text COLLATE "C" NOT NULL,
    instance_id   text COLLATE "C" NOT NULL,
    project_id    text,
    type          text NOT NULL,
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
CREATE TABLE instance_events_pruned (
    id        boolean PRIMARY KEY DEFAULT true CHECK (id),
    xid       xid8 NOT NULL,
    seq       bigint NOT NULL,
    pruned_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO instance_events (tenant_id, pool_id, instance_id, project_id, type, state, desired_state, state_reason, occurred_at, instance)
SELECT tenant_id, pool_id, resource_id, data->>'projectId', type, data->>'state', data->>'desiredState', data->>'stateReason', occurred_at, data
FROM events WHERE resource_type = 'instance' ORDER BY tenant_id, seq;
DROP TABLE events;
DROP TABLE event_inbox;
DROP TABLE event_streams;
