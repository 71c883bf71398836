-- +goose Up
-- Deleted instances stay as rows, and the lists of a tenant's, pool's or
-- project's instances leave them out unless the state filter asks for
-- them. The tenant index ordered the tenant's rows by id only, so a page of
-- live instances walked past every deleted one, and so did each page's
-- total: with 2,000 deleted instances beside 30 live ones, a page read
-- 2,052 rows and its count 2,030. A list now reads one of two indexes of
-- its tenant, pool or project (instances.StateBranches): the live
-- instances' (partial, without the deleted ones) when no state is asked
-- for, or the one keyed by state when one is. The project indexes also
-- serve a project's deletion (ON DELETE SET NULL), which read the whole
-- table.
DROP INDEX instances_tenant_idx;
CREATE INDEX instances_tenant_idx ON instances (tenant_id, state, instance_id);
CREATE INDEX instances_tenant_live_idx ON instances (tenant_id, instance_id) WHERE state <> 'deleted';
CREATE INDEX instances_pool_state_idx ON instances (pool_id, state, instance_id);
CREATE INDEX instances_pool_live_idx ON instances (pool_id, instance_id) WHERE state <> 'deleted';
CREATE INDEX instances_project_idx ON instances (project_id, state, instance_id) WHERE project_id IS NOT NULL;
CREATE INDEX instances_project_live_idx ON instances (project_id, instance_id) WHERE state <> 'deleted';

-- +goose Down
DROP INDEX instances_project_live_idx;
DROP INDEX instances_project_idx;
DROP INDEX instances_pool_live_idx;
DROP INDEX instances_pool_state_idx;
DROP INDEX instances_tenant_live_idx;
DROP INDEX instances_tenant_idx;
CREATE INDEX instances_tenant_idx ON instances (tenant_id, instance_id);
