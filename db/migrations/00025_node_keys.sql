-- +goose Up
-- A key pair is one live node's on the whole platform, whatever CSR
-- carries it (nodes.join): until now a node was unique by its CSR's DER
-- (csr_fingerprint), and a new CSR of a live node's key (another subject,
-- or an ECDSA signature made again) joined a second node with that key, in
-- the same tenant or another. key_fingerprint is the SHA-256 of the key's
-- SubjectPublicKeyInfo. Nodes that joined before this migration get theirs
-- from their certificate when a replica starts (nodes.RecordNodeKeys); until
-- then, and for one whose key another live node already holds, a join finds
-- them by their CSR as before.
ALTER TABLE nodes ADD COLUMN key_fingerprint text COLLATE "C";
CREATE UNIQUE INDEX nodes_key_fingerprint_key ON nodes (key_fingerprint) WHERE state <> 'removed';

-- +goose Down
DROP INDEX nodes_key_fingerprint_key;
ALTER TABLE nodes DROP COLUMN key_fingerprint;
