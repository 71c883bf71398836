-- +goose Up
-- A mutation holds the authority it was decided on (the caller's role
-- binding on a tenant, its relation to a project) until it commits, so that
-- a revocation waits for it or it sees the revocation. That hold was a share
-- lock of the binding's row, and PostgreSQL lets a new share lock of a row
-- overtake a waiting writer: a member making calls without pause kept
-- members.revoke waiting until its statement timed out.
--
-- Now the decision first takes a shared transaction advisory lock on the
-- authority (authority_held, a statement of its own, so the read after it
-- has a snapshot taken after the lock), and a change of the authority takes
-- it exclusively before it writes (authority_changing): heavyweight locks
-- queue a new shared request behind a waiting exclusive one. The row share
-- locks stay (they also hold against a change made outside these methods),
-- but a change that holds the advisory lock no longer waits on them.
-- +goose StatementBegin
CREATE FUNCTION authority_held(authority text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock_shared(hashtextextended('compute-authority:' || authority, 0))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION authority_changing(authority text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('compute-authority:' || authority, 0))
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION authority_changing(text);
DROP FUNCTION authority_held(text);
