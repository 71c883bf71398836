-- +goose Up
-- An instance in a pool offered to its tenant runs on a node of the pool's
-- owner, and the tenants a pool is offered to do not see its nodes: its
-- answers leave hostNodeId out (null), as the graph's host link already
-- did. Pools never change owner, so whether an instance is offered is
-- fixed at its create.
ALTER TABLE instances ADD COLUMN offered boolean NOT NULL DEFAULT false;
UPDATE instances i SET offered = true FROM pools p WHERE p.pool_id = i.pool_id AND p.tenant_id <> i.tenant_id;

-- +goose Down
ALTER TABLE instances DROP COLUMN offered;
