-- +goose Up
-- The tpm attestor proves possession of the TPM by credential activation:
-- nodes.join answers the machine's keys with a challenge, a secret the
-- server encrypted to the endorsement key for the attestation key's name.
-- Only the secret's SHA-256 is kept. A challenge is single-use (used_at),
-- lives 5 minutes, and is bound to the join token, the CSR's fingerprint,
-- the hardware ids, the EK and the AK.
-- Keyed by tenant (the join token's), so the table is distributable by
-- tenant (docs/scaling.md); join_tokens gains the unique key the foreign key
-- names.
ALTER TABLE join_tokens ADD CONSTRAINT join_tokens_tenant_key UNIQUE (tenant_id, join_token_id);
CREATE TABLE tpm_challenges (
    tenant_id       text NOT NULL,
    challenge_id    text COLLATE "C" NOT NULL,
    join_token_id   text COLLATE "C" NOT NULL,
    csr_fingerprint text COLLATE "C" NOT NULL,
    hardware        jsonb NOT NULL,
    ek_hash         text COLLATE "C" NOT NULL CHECK (ek_hash ~ '^[0-9a-f]{64}$'),
    ak_name         bytea NOT NULL,
    -- SHA-256 (hex) of the allow-listed CA certificates the machine's EK
    -- certificate chained to when the challenge was made.
    ek_ca_hashes    text[] NOT NULL DEFAULT '{}',
    secret_hash     bytea NOT NULL,
    expires_at      timestamptz NOT NULL,
    used_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, challenge_id),
    FOREIGN KEY (tenant_id, join_token_id) REFERENCES join_tokens (tenant_id, join_token_id)
);
CREATE INDEX tpm_challenges_token_idx ON tpm_challenges (tenant_id, join_token_id, expires_at);
-- A refused answer is spent after the join's rollback, knowing only the id.
CREATE INDEX tpm_challenges_id_idx ON tpm_challenges (challenge_id);

-- The owner sees that a deferred tpm join proved possession of its EK.
ALTER TABLE join_requests ADD COLUMN ek_proven boolean NOT NULL DEFAULT false;

-- The allow-list also takes CA certificates (a TPM manufacturer's root or
-- intermediate): an EK whose certificate chains to one is allowed. For a CA
-- entry, ek_hash is the SHA-256 of the certificate's DER.
ALTER TABLE tpm_allowed_keys
    ADD COLUMN kind text NOT NULL DEFAULT 'ek' CHECK (kind IN ('ek', 'ca')),
    ADD COLUMN certificate bytea,
    ADD CONSTRAINT tpm_allowed_keys_ca_certificate CHECK ((kind = 'ca') = (certificate IS NOT NULL));

-- +goose Down
ALTER TABLE tpm_allowed_keys DROP CONSTRAINT tpm_allowed_keys_ca_certificate, DROP COLUMN certificate, DROP COLUMN kind;
ALTER TABLE join_requests DROP COLUMN ek_proven;
DROP TABLE tpm_challenges;
ALTER TABLE join_tokens DROP CONSTRAINT join_tokens_tenant_key;
