-- +goose Up
-- A public profile id belongs to one tenant. Lookups take the tenant's own
-- profile, then a public stored one, then one a module ships; with two
-- tenants publishing one id, the latest public version won, so any tenant
-- could switch every other tenant's lookups (and their workflows' images)
-- to its own document, the ids modules ship included.
--
-- public_profile_ids holds, per public id, the tenant that publishes it.
-- Making a version public (profiles.create, profiles.update) inserts or
-- locks the id's row in the same transaction and is CONFLICT when another
-- tenant holds it; the publisher's last public version going private or
-- deleted removes the row. The foreign key from every live public version
-- to its id's row makes two publishers of one id impossible whatever
-- writes the table. Ids modules ship live in code; the domain refuses to
-- make them public. It is a reference table on the road past one
-- PostgreSQL (docs/scaling.md), like csr_claims.
CREATE TABLE public_profile_ids (
    profile_id text PRIMARY KEY,
    tenant_id  text NOT NULL,
    UNIQUE (profile_id, tenant_id)
);

-- Existing data, kept simple. Public versions of the ids the provision
-- module ships at this migration (internal/profiles/builtin.go) become
-- private: their owners keep them, no one else's lookups see them. An id
-- a module starts shipping later is refused from then on; a version some
-- tenant published before that stays public until its owner changes it.
UPDATE profiles SET visibility = 'private', row_version = row_version + 1, updated_at = now()
WHERE visibility = 'public' AND deleted_at IS NULL
  AND profile_id IN ('ubuntu-24.04-gpu-nvidia', 'rocky-9-base', 'ubuntu-24.04-mig-inference');

-- An id several tenants publish stays with the one that published it first
-- (its earliest live public version; ties by tenant id); the other tenants'
-- versions of it become private.
INSERT INTO public_profile_ids (profile_id, tenant_id)
SELECT DISTINCT ON (profile_id) profile_id, tenant_id
FROM profiles
WHERE visibility = 'public' AND deleted_at IS NULL
ORDER BY profile_id, created_at, tenant_id COLLATE "C";

UPDATE profiles p SET visibility = 'private', row_version = row_version + 1, updated_at = now()
WHERE p.visibility = 'public' AND p.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM public_profile_ids c WHERE c.profile_id = p.profile_id AND c.tenant_id = p.tenant_id);

ALTER TABLE profiles
    ADD COLUMN public_profile_id text
        GENERATED ALWAYS AS (CASE WHEN visibility = 'public' AND deleted_at IS NULL THEN profile_id END) STORED,
    ADD CONSTRAINT profiles_public_profile_id_fkey FOREIGN KEY (public_profile_id, tenant_id)
        REFERENCES public_profile_ids (profile_id, tenant_id);
-- The foreign key's check when an id's row goes (a release).
CREATE INDEX profiles_public_profile_id_idx ON profiles (public_profile_id, tenant_id)
    WHERE public_profile_id IS NOT NULL;

-- +goose Down
ALTER TABLE profiles DROP COLUMN public_profile_id;
DROP TABLE public_profile_ids;
