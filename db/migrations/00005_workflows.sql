-- +goose Up
-- Workflows: one run of a profile version on one node. A workflow keeps a
-- snapshot of the profile document and of the rendered steps, so later
-- changes or deletes of the profile never touch it. steps is a JSON array of
-- {index, name, use, phase, with, status, startedAt, finishedAt, message},
-- status one of pending, running, succeeded, failed, skipped.

CREATE TABLE workflows (
    workflow_id       text COLLATE "C" PRIMARY KEY,
    tenant_id         text NOT NULL REFERENCES tenants (tenant_id),
    node_id           text COLLATE "C" NOT NULL REFERENCES nodes (node_id),
    -- The tenant holding the profile version (builtin for the shipped ones,
    -- which live in code, so no foreign key).
    profile_tenant_id text NOT NULL,
    profile_id        text NOT NULL,
    profile_version   integer NOT NULL CHECK (profile_version BETWEEN 1 AND 1000000),
    profile_document  jsonb NOT NULL,
    steps             jsonb NOT NULL CHECK (jsonb_typeof(steps) = 'array'),
    state             text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'canceled')),
    row_version       integer NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CONSTRAINT workflows_finished_check CHECK ((state IN ('pending', 'running')) = (finished_at IS NULL))
);
-- Listing by tenant and by node, in id (creation) order.
CREATE INDEX workflows_tenant_idx ON workflows (tenant_id, workflow_id);
CREATE INDEX workflows_node_idx ON workflows (node_id, workflow_id);
-- A node runs one workflow at a time.
CREATE UNIQUE INDEX workflows_node_active_key ON workflows (node_id) WHERE state IN ('pending', 'running');

-- +goose Down
DROP TABLE workflows;
