-- +goose Up
-- Tenants, principals and their tokens, role bindings, projects and their
-- relationships, and the audit log.

CREATE TABLE tenants (
    tenant_id   text PRIMARY KEY,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A principal is who a token authenticates: the operator, a user or service
-- account of a tenant, or a node.
CREATE TABLE principals (
    principal_id text PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN ('operator', 'user', 'service', 'node')),
    tenant_id    text REFERENCES tenants (tenant_id),
    name         text NOT NULL,
    node_id      text,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Bearer tokens, stored only as SHA-256 hashes of the secret.
CREATE TABLE tokens (
    token_id     text PRIMARY KEY,
    principal_id text NOT NULL REFERENCES principals (principal_id),
    tenant_id    text REFERENCES tenants (tenant_id),
    name         text NOT NULL,
    role         text,
    secret_hash  bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    CONSTRAINT tokens_secret_hash_key UNIQUE (secret_hash)
);
CREATE INDEX tokens_tenant_idx ON tokens (tenant_id, token_id);

-- Role bindings on tenants: the relationship the role table decides from.
CREATE TABLE role_bindings (
    tenant_id    text NOT NULL REFERENCES tenants (tenant_id),
    principal_id text NOT NULL REFERENCES principals (principal_id),
    role         text NOT NULL CHECK (role IN ('viewer', 'member', 'admin')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, principal_id)
);
CREATE INDEX role_bindings_principal_idx ON role_bindings (principal_id);

CREATE TABLE projects (
    project_id  text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    row_version integer NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT projects_tenant_name_key UNIQUE (tenant_id, name)
);
CREATE INDEX projects_tenant_idx ON projects (tenant_id, project_id);

-- owner/member relationships on compute-project/{projectId}.
CREATE TABLE project_relations (
    project_id   text NOT NULL REFERENCES projects (project_id) ON DELETE CASCADE,
    principal_id text NOT NULL REFERENCES principals (principal_id),
    relation     text NOT NULL CHECK (relation IN ('owner', 'member')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, principal_id)
);
CREATE INDEX project_relations_principal_idx ON project_relations (principal_id);

-- One row per mutation attempt, written in the same transaction as a change.
CREATE TABLE audit_log (
    audit_id     text PRIMARY KEY,
    principal_id text,
    method       text NOT NULL,
    resource     text NOT NULL,
    outcome      text NOT NULL,
    request_id   text NOT NULL,
    occurred_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_time_idx ON audit_log (occurred_at);

-- Values generated once and shared by every replica (the cursor key).
CREATE TABLE server_secrets (
    name       text PRIMARY KEY,
    value      bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The reserved tenant that holds the profiles modules ship.
INSERT INTO tenants (tenant_id, name) VALUES ('builtin', 'Profiles shipped with modules');

-- +goose Down
DROP TABLE server_secrets;
DROP TABLE audit_log;
DROP TABLE project_relations;
DROP TABLE projects;
DROP TABLE role_bindings;
DROP TABLE tokens;
DROP TABLE principals;
DROP TABLE tenants;
