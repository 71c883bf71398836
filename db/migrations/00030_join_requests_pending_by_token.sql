-- +goose NO TRANSACTION
-- +goose Up
-- A join token holds at most nodes.MaxPendingRequests pending requests:
-- the count, made with the token's row locked at each deferral, reads
-- only that token's pending requests.
DROP INDEX CONCURRENTLY IF EXISTS join_requests_token_pending_idx;
CREATE INDEX CONCURRENTLY join_requests_token_pending_idx ON join_requests (join_token_id, expires_at) WHERE state = 'pending';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS join_requests_token_pending_idx;
