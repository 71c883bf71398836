package profiles

import (
	"context"
	"database/sql"
	"errors"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
)

// IDField is the profileId input field, for every method that names a
// profile.
func IDField() registry.Field {
	return registry.Field{Name: "profileId", Type: registry.String, Required: true, MaxLength: MaxID, Pattern: registry.ProfileIDPattern}
}

// VersionField is the profileVersion input field (optional: the latest).
func VersionField(required bool) registry.Field {
	return registry.Field{Name: "profileVersion", Type: registry.Integer, Required: required, Min: registry.Int(1), Max: registry.Int(MaxVersion)}
}

// Resolve finds the version a tenant's reads resolve to: its own, then a
// public stored one, then one a module ships; the latest when version is
// nil. NOT_FOUND when none matches.
func Resolve(ctx context.Context, q store.Q, tenantID, id string, version *int) (*Profile, error) {
	return lookup(ctx, q, tenantID, id, version)
}

// Shipped reports whether p is one of the profiles modules ship (they live
// in code: nothing to lock or mark).
func (p *Profile) Shipped() bool { return p.TenantID == authz.BuiltinTenant }

// ForUse resolves the version a workflow of tenantID runs, like Resolve, and
// for a stored version locks its row (FOR UPDATE) for the rest of the
// caller's transaction, returning the document as it is under the lock.
// Update takes the same lock and reads used under it, so a document update
// and a first use are serialized: the workflow snapshots either the
// document before the update (and the update then sees used) or the one
// after it. q must be the caller's transaction.
func ForUse(ctx context.Context, q store.Q, tenantID, id string, version *int) (*Profile, error) {
	for attempt := 0; ; attempt++ {
		p, err := lookup(ctx, q, tenantID, id, version)
		if err != nil || p.Shipped() {
			return p, err
		}
		var locked Profile
		err = q.GetContext(ctx, &locked, `SELECT `+cols+` FROM profiles
			WHERE tenant_id = $1 AND profile_id = $2 AND profile_version = $3 AND deleted_at IS NULL
			  AND (tenant_id = $4 OR visibility = 'public')
			FOR UPDATE`, p.TenantID, p.ProfileID, p.ProfileVersion, tenantID)
		if err == nil {
			return locked.fix(), nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, store.Wrap(err)
		}
		// Deleted or made private between the lookup and the lock: resolve
		// again (the latest may now be another version).
		if attempt == 2 {
			return nil, notFound(id, version)
		}
	}
}

// MarkUsed records the first use of a version ForUse locked: used becomes
// true, which bumps rowVersion and updatedAt (the representation changed,
// and the document is immutable from now on). Later uses change nothing;
// shipped profiles are not stored and are returned as they are.
func MarkUsed(ctx context.Context, q store.Q, p *Profile) (*Profile, error) {
	if p.Shipped() || p.Used {
		return p, nil
	}
	var out Profile
	err := q.GetContext(ctx, &out, `UPDATE profiles SET used = true, row_version = row_version + 1, updated_at = now()
		WHERE tenant_id = $1 AND profile_id = $2 AND profile_version = $3 AND deleted_at IS NULL
		RETURNING `+cols, p.TenantID, p.ProfileID, p.ProfileVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(p.ProfileID, &p.ProfileVersion)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return out.fix(), nil
}
