-- +goose Up
-- The home tenant of the principal a record names (a user's, a service
-- token's, a node's; null for the operator, the server itself and join
-- tokens): a record in acme's trail of a call by another tenant's
-- principal said only its id, kind and display name, and display names
-- are free text (a beta token may be named "operator"). Records written
-- before this migration keep null.
ALTER TABLE audit_log ADD COLUMN principal_tenant_id text;

-- +goose Down
ALTER TABLE audit_log DROP COLUMN principal_tenant_id;
