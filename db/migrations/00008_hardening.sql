-- +goose Up
-- A denial may say why (Kubernetes' CSR denial does); the audit row keeps
-- the inputs a method names as its audit detail.
ALTER TABLE join_requests ADD COLUMN deny_reason text;
ALTER TABLE audit_log ADD COLUMN detail jsonb;

-- +goose Down
ALTER TABLE audit_log DROP COLUMN detail;
ALTER TABLE join_requests DROP COLUMN deny_reason;
