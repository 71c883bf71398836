-- +goose Up
-- Deleted instances are removed once the event retention has passed since
-- their deletion (instances.Purge, with the events' retention job): the
-- job finds them oldest first by this index, which holds deleted ones only.
CREATE INDEX instances_purge_idx ON instances (deleted_at) WHERE state = 'deleted';

-- +goose Down
DROP INDEX instances_purge_idx;
