-- +goose Up
-- A pass numbers the committed inbox rows of a tenant it moves together in
-- the order their inserts ran, not by transaction id (issue 17, commit
-- order per tenant). A transaction's id is assigned at its first write,
-- which can come before it waits for another transaction's row lock: the
-- waiter then commits after the holder, having seen its effects, with the
-- smaller id, and ordering by id put the waiter's event first (a workflow's
-- succeeded event before the step event of the report it waited for).
-- events.Write's insert runs with its transaction's COMMIT
-- (store.ExecAtCommit), after every wait of the transaction, so a
-- transaction that saw another's commit inserts its events after that
-- other's inserts: clock_timestamp() at the insert orders them so. Ties (the
-- clock's microsecond) fall back to the transaction id and the order within
-- the transaction.
ALTER TABLE event_inbox ADD COLUMN inserted_at timestamptz NOT NULL DEFAULT clock_timestamp();

-- +goose Down
ALTER TABLE event_inbox DROP COLUMN inserted_at;
