-- +goose NO TRANSACTION
-- +goose Up
-- A trail filtered by method (audit.list method, auditLog(method:)) read
-- the tenant's whole trail through its time index when few or no records
-- matched: 0.2-1.2 s a page over a million records, past the statement
-- timeout for a busy tenant's 400 days. Built concurrently, so a large trail
-- keeps taking records meanwhile; an invalid index a failed build left is
-- dropped first.
DROP INDEX CONCURRENTLY IF EXISTS audit_log_method_time_idx;
CREATE INDEX CONCURRENTLY audit_log_method_time_idx ON audit_log (tenant_id, method, occurred_at, audit_id);

-- Retention's index is keyed by an expression only audit_prune reads: on
-- occurred_at itself it was the planner's choice for a filtered page with a
-- time bound (it read every tenant's records newest first, filtering out a
-- million, instead of the tenant's method or principal index).
DROP INDEX CONCURRENTLY IF EXISTS audit_log_prune_idx;
CREATE INDEX CONCURRENTLY audit_log_prune_idx ON audit_log ((occurred_at AT TIME ZONE 'UTC'));

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION audit_prune(cutoff timestamptz, max_rows integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM set_config('compute.audit_prune_before', cutoff::text, true);
    DELETE FROM audit_log a USING (
        SELECT tenant_id, audit_id FROM audit_log
        WHERE (occurred_at AT TIME ZONE 'UTC') < (cutoff AT TIME ZONE 'UTC')
        ORDER BY (occurred_at AT TIME ZONE 'UTC') LIMIT max_rows) old
    WHERE a.tenant_id = old.tenant_id AND a.audit_id = old.audit_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('compute.audit_prune_before', '', true);
    RETURN n;
END;
$$;
-- +goose StatementEnd

DROP INDEX CONCURRENTLY IF EXISTS audit_log_time_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS audit_log_time_idx ON audit_log (occurred_at);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION audit_prune(cutoff timestamptz, max_rows integer) RETURNS bigint LANGUAGE plpgsql AS $$
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
DROP INDEX CONCURRENTLY IF EXISTS audit_log_prune_idx;
DROP INDEX CONCURRENTLY IF EXISTS audit_log_method_time_idx;
