-- +goose Up
-- Profiles: versioned recipes provisioning workflows run. Deleting hides a
-- version (deleted_at); hidden rows are invisible to every method. The
-- profiles modules ship (tenant builtin) live in code, not here.

CREATE TABLE profiles (
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    profile_id      text NOT NULL CHECK (char_length(profile_id) BETWEEN 1 AND 128),
    profile_version integer NOT NULL CHECK (profile_version BETWEEN 1 AND 1000000),
    visibility      text NOT NULL DEFAULT 'private' CHECK (visibility IN ('private', 'public')),
    document        jsonb NOT NULL,
    row_version     integer NOT NULL DEFAULT 1,
    used            boolean NOT NULL DEFAULT false,
    deleted_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, profile_id, profile_version)
);
-- The list's keyset order (byte order), for own rows and for public ones.
CREATE INDEX profiles_tenant_key_idx ON profiles (tenant_id, (profile_id COLLATE "C"), profile_version)
    WHERE deleted_at IS NULL;
CREATE INDEX profiles_public_key_idx ON profiles ((profile_id COLLATE "C"), profile_version)
    WHERE deleted_at IS NULL AND visibility = 'public';

-- +goose Down
DROP TABLE profiles;
