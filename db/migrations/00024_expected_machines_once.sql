-- +goose Up
-- A machine registered twice with the same ids is one expected machine
-- (machines.register answers the first registration again): a probe's 32
-- concurrent registrations of one serial made 32 entries. Entries already
-- registered twice keep their first.
DELETE FROM expected_machines m USING expected_machines f
WHERE f.pool_id = m.pool_id
  AND f.system_uuid IS NOT DISTINCT FROM m.system_uuid
  AND f.serial IS NOT DISTINCT FROM m.serial
  AND f.mac IS NOT DISTINCT FROM m.mac
  AND f.machine_id < m.machine_id;
CREATE UNIQUE INDEX expected_machines_ids_key ON expected_machines
    (pool_id, coalesce(system_uuid, ''), coalesce(serial, ''), coalesce(mac, ''));

-- +goose Down
DROP INDEX expected_machines_ids_key;
