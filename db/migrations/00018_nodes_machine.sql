-- +goose Up
-- A node admitted through the tpm attestor keeps the endorsement key its
-- machine proved holding: a live node of the tenant with the same key (as
-- with the same system UUID) refuses another admission of the machine.
-- The joins of one machine take a transaction advisory lock on its ids
-- (nodes.admit), so that the check and the insert are one decision; the
-- indexes make the check a lookup rather than a scan of the tenant's nodes.
ALTER TABLE nodes ADD COLUMN ek_hash text COLLATE "C";
CREATE INDEX nodes_tenant_uuid_idx ON nodes (tenant_id, system_uuid) WHERE state <> 'removed';
CREATE INDEX nodes_tenant_ek_idx ON nodes (tenant_id, ek_hash) WHERE state <> 'removed' AND ek_hash IS NOT NULL;

-- +goose Down
DROP INDEX nodes_tenant_ek_idx;
DROP INDEX nodes_tenant_uuid_idx;
ALTER TABLE nodes DROP COLUMN ek_hash;
