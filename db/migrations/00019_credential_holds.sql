-- +goose Up
-- A revoked token stops working for the calls already inside their
-- transactions too, not only for the calls that arrive after it: a call is
-- authenticated as it arrives, and one queued on a lock when its token was
-- revoked went on to commit after tokens.revoke had answered.
--
-- Every mutation's commit runs credential_in_use for its token first
-- (auth.HoldCredential, sent with the COMMIT): a shared transaction
-- advisory lock on the token, then, in a statement of its own (so with a
-- snapshot taken after the lock), the check that it is not revoked. A
-- revocation takes the same lock exclusively before it writes
-- (credential_revoking): it waits for the commits holding the token, and the
-- ones that come after it queue behind it and find the token revoked. An
-- advisory lock rather than FOR SHARE on the token's row: PostgreSQL queues
-- a new shared request behind a waiting exclusive one for its heavyweight
-- locks, where row share locks overtake a waiting writer, so a stream of
-- calls could keep a revocation waiting for ever.
-- +goose StatementBegin
CREATE FUNCTION credential_in_use(token text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('compute-credential:' || token, 0));
    -- A call that revokes its own token commits: the revocation it made
    -- itself (its row version's xmin) does not count against it.
    PERFORM 1 FROM tokens WHERE token_id = token
        AND (revoked_at IS NULL OR xmin = pg_current_xact_id_if_assigned()::xid);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the credential was revoked' USING ERRCODE = 'CR401';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION credential_revoking(token text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('compute-credential:' || token, 0))
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION credential_revoking(text);
DROP FUNCTION credential_in_use(text);
