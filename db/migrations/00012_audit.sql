-- +goose Up
-- The audit trail becomes readable by tenant (issue 20): every record names
-- its tenant, the principal as it was (id, kind, display name), the
-- resource as type and id, and the client address the rate limits used.
-- The table is append-only: a trigger refuses UPDATE, DELETE and TRUNCATE,
-- except the retention pruner's deletes through audit_prune().
--
-- Keys: the primary key leads with tenant_id, so the table can be
-- distributed by tenant (docs/scaling.md). Records that belong to no tenant
-- (a tenant created by the operator is its own tenant's record; the pruning
-- itself, an unknown join token, a call naming a tenant that does not
-- exist) live under the reserved tenant id '@platform', which no tenant can
-- take ('@' is outside the tenant id pattern) and only the operator reads.

ALTER TABLE audit_log
    ADD COLUMN tenant_id      text,
    ADD COLUMN principal_kind text,
    ADD COLUMN principal_name text,
    ADD COLUMN resource_type  text,
    ADD COLUMN resource_id    text,
    ADD COLUMN client_addr    text;

-- Resources were one string: platform, compute-tenant/{t},
-- compute-profile/{t}/{profileId}, or compute-{type}/{id}.
UPDATE audit_log SET
    resource_type = split_part(resource, '/', 1),
    resource_id = CASE split_part(resource, '/', 1)
        WHEN 'platform' THEN ''
        WHEN 'compute-profile' THEN split_part(resource, '/', 3)
        ELSE substr(resource, strpos(resource, '/') + 1) END,
    outcome = CASE outcome WHEN 'ok' THEN 'success' ELSE outcome END;

-- The principal as it is now (earlier records did not keep its name).
UPDATE audit_log a SET principal_kind = p.kind, principal_name = p.name
FROM principals p WHERE p.principal_id = a.principal_id;
UPDATE audit_log SET principal_kind = 'system', principal_name = 'vps.instances reconciler'
WHERE principal_id = 'system:vps.instances';
-- Only nodes.join ran without a principal: its join token was the credential.
UPDATE audit_log SET principal_kind = 'join-token', principal_name = 'join token'
WHERE principal_id IS NULL;
UPDATE audit_log SET principal_kind = 'unknown', principal_name = '' WHERE principal_kind IS NULL;

-- The tenant, where it can be derived:
--  1. a tenant or profile resource names its tenant (the tenant the call named);
--  2. a pool, node, project or instance resource: its owner, for successes
--     and the reconciler's moves; for failures only when the caller was the
--     operator, belongs to that tenant or holds a role on it (a failure by
--     someone else named another tenant, which the old record did not keep);
--  3. a failure on such a resource otherwise: the caller's own tenant;
--  4. otherwise '@platform' (tenants.create, whose old resource was
--     "platform"; joins with an unknown token; resources since removed).
UPDATE audit_log a SET tenant_id = COALESCE(
    CASE a.resource_type
        WHEN 'compute-tenant' THEN (SELECT t.tenant_id FROM tenants t WHERE t.tenant_id = a.resource_id)
        WHEN 'compute-profile' THEN (SELECT t.tenant_id FROM tenants t WHERE t.tenant_id = split_part(a.resource, '/', 2))
    END,
    (SELECT o.tenant_id FROM (
            SELECT tenant_id FROM pools WHERE a.resource_type = 'compute-pool' AND pool_id = a.resource_id
            UNION ALL SELECT tenant_id FROM nodes WHERE a.resource_type = 'compute-node' AND node_id = a.resource_id
            UNION ALL SELECT tenant_id FROM projects WHERE a.resource_type = 'compute-project' AND project_id = a.resource_id
            UNION ALL SELECT tenant_id FROM instances WHERE a.resource_type = 'compute-instance' AND instance_id = a.resource_id) o
        WHERE a.outcome = 'success' OR a.principal_kind IN ('system', 'operator')
           OR EXISTS (SELECT 1 FROM principals p WHERE p.principal_id = a.principal_id AND p.tenant_id = o.tenant_id)
           OR EXISTS (SELECT 1 FROM role_bindings b WHERE b.principal_id = a.principal_id AND b.tenant_id = o.tenant_id)
        LIMIT 1),
    CASE WHEN a.resource_type IN ('compute-pool', 'compute-node', 'compute-project', 'compute-instance') THEN
        (SELECT p.tenant_id FROM principals p JOIN tenants t ON t.tenant_id = p.tenant_id WHERE p.principal_id = a.principal_id)
    END,
    '@platform');

ALTER TABLE audit_log
    DROP CONSTRAINT audit_log_pkey,
    DROP COLUMN resource,
    ALTER COLUMN tenant_id SET NOT NULL,
    ALTER COLUMN principal_kind SET NOT NULL,
    ALTER COLUMN principal_name SET NOT NULL,
    ALTER COLUMN resource_type SET NOT NULL,
    ALTER COLUMN resource_id SET NOT NULL,
    ALTER COLUMN occurred_at SET DEFAULT clock_timestamp(),
    ADD CONSTRAINT audit_log_principal_kind_check
        CHECK (principal_kind IN ('operator', 'user', 'service', 'node', 'system', 'join-token', 'unknown')),
    ADD PRIMARY KEY (tenant_id, audit_id);
DROP INDEX audit_log_time_idx;
-- Pages are newest first by (occurred_at, audit_id): a tenant's trail, one
-- resource's (instances, pools and nodes in the graph), one principal's.
CREATE INDEX audit_log_tenant_time_idx ON audit_log (tenant_id, occurred_at, audit_id);
CREATE INDEX audit_log_resource_time_idx ON audit_log (resource_id, occurred_at, audit_id);
CREATE INDEX audit_log_principal_time_idx ON audit_log (tenant_id, principal_id, occurred_at, audit_id);
-- Retention deletes the oldest records first, across tenants.
CREATE INDEX audit_log_time_idx ON audit_log (occurred_at);

-- Append-only. A row may be deleted only by audit_prune(), which sets the
-- transaction-local compute.audit_prune_before to its cutoff, and only when
-- it is older than that cutoff. This guards the records against the
-- application and against mistakes in a SQL session; the table's owner can
-- still disable the trigger (docs/design.md says what that means).
-- +goose StatementBegin
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cutoff text := current_setting('compute.audit_prune_before', true);
BEGIN
    IF TG_OP = 'DELETE' AND cutoff IS NOT NULL AND cutoff <> '' AND OLD.occurred_at < cutoff::timestamptz THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege', HINT = 'records leave only through audit_prune(cutoff), the retention pruner';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_log_no_change BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- audit_prune deletes up to max_rows of the oldest records older than
-- cutoff and returns how many it deleted.
-- +goose StatementBegin
CREATE FUNCTION audit_prune(cutoff timestamptz, max_rows integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM set_config('compute.audit_prune_before', cutoff::text, true);
    DELETE FROM audit_log a USING (
        SELECT tenant_id, audit_id FROM audit_log WHERE occurred_at < cutoff ORDER BY occurred_at LIMIT max_rows) old
    WHERE a.tenant_id = old.tenant_id AND a.audit_id = old.audit_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('compute.audit_prune_before', '', true);
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION audit_prune(timestamptz, integer);
DROP TRIGGER audit_log_no_truncate ON audit_log;
DROP TRIGGER audit_log_no_change ON audit_log;
DROP FUNCTION audit_log_append_only();
DROP INDEX audit_log_time_idx;
DROP INDEX audit_log_principal_time_idx;
DROP INDEX audit_log_resource_time_idx;
DROP INDEX audit_log_tenant_time_idx;
ALTER TABLE audit_log ADD COLUMN resource text;
UPDATE audit_log SET
    resource = CASE resource_type
        WHEN 'platform' THEN 'platform'
        WHEN 'compute-profile' THEN resource_type || '/' || tenant_id || '/' || resource_id
        ELSE resource_type || '/' || resource_id END,
    outcome = CASE outcome WHEN 'success' THEN 'ok' ELSE outcome END;
ALTER TABLE audit_log
    DROP CONSTRAINT audit_log_pkey,
    DROP CONSTRAINT audit_log_principal_kind_check,
    ALTER COLUMN resource SET NOT NULL,
    ALTER COLUMN occurred_at SET DEFAULT now(),
    DROP COLUMN client_addr,
    DROP COLUMN resource_id,
    DROP COLUMN resource_type,
    DROP COLUMN principal_name,
    DROP COLUMN principal_kind,
    DROP COLUMN tenant_id,
    ADD PRIMARY KEY (audit_id);
CREATE INDEX audit_log_time_idx ON audit_log (occurred_at);
