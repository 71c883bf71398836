-- +goose NO TRANSACTION
-- +goose Up
-- A stream read by type (events.list types, Tenant.events(types:), a
-- tenantEvents or instanceEvents replay, a reader's resource types) reads
-- each type's events through this index (events.Page), not the tenant's
-- whole stream filtered. Built concurrently, an invalid index a failed
-- build left dropped first.
DROP INDEX CONCURRENTLY IF EXISTS events_type_idx;
CREATE INDEX CONCURRENTLY events_type_idx ON events (tenant_id, type, seq);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS events_type_idx;
