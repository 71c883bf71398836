-- +goose Up
-- Whether an instance was ever placed: it left pending for provisioning
-- (a host and devices chosen, or its provider's VM created), or its
-- provider was asked to create it and the instance failed after the tries.
-- One that failed before it was placed (its pool archived or no longer
-- offered to its tenant while it waited, a provider this server does not
-- have) holds no room in its pool: a probe's offered tenant's pending
-- instance, failed by an unoffer, kept the owner's next instance waiting
-- on an empty host until that tenant deleted it.
ALTER TABLE instances ADD COLUMN placed boolean NOT NULL DEFAULT false;
-- Instances that left pending before this migration were placed, except a
-- failed one of a hosted pool without a host (placement sets the host).
UPDATE instances i SET placed = true
    WHERE state NOT IN ('pending', 'deleted')
    AND NOT (state = 'failed' AND host_node_id IS NULL
        AND EXISTS (SELECT 1 FROM pools p WHERE p.pool_id = i.pool_id AND p.kind = 'vps-hosted'));

-- The move from pending to provisioning places an instance, whatever
-- statement makes it (internal/instances move, and tests' fixtures).
-- +goose StatementBegin
CREATE FUNCTION instances_placed_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'pending' AND NEW.state = 'provisioning' THEN
        NEW.placed := true;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER instances_placed BEFORE UPDATE OF state ON instances
    FOR EACH ROW EXECUTE FUNCTION instances_placed_mark();

-- +goose Down
DROP TRIGGER instances_placed ON instances;
DROP FUNCTION instances_placed_mark();
ALTER TABLE instances DROP COLUMN placed;
