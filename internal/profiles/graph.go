package profiles

import (
	"context"
	"math"
	"sort"
	"strings"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
)

// Key names one profile version.
type Key struct {
	TenantID       string
	ProfileID      string
	ProfileVersion int
}

// ByKeys loads the profile versions of keys visible in scope (stored ones
// through Visible, shipped ones to every reader) in at most one statement,
// keyed by Key.
func ByKeys(ctx context.Context, q store.Q, scope authz.Scope, keys []Key) (map[Key]*Profile, error) {
	out := make(map[Key]*Profile, len(keys))
	var tenants, ids []string
	var versions []int
	for _, k := range keys {
		if k.TenantID == authz.BuiltinTenant {
			if p, ok := builtin(k.ProfileID, k.ProfileVersion); ok && scope.Has(authz.BuiltinTenant) {
				out[k] = p
			}
			continue
		}
		tenants, ids, versions = append(tenants, k.TenantID), append(ids, k.ProfileID), append(versions, k.ProfileVersion)
	}
	if len(tenants) == 0 {
		return out, nil
	}
	var rows []Profile
	err := q.SelectContext(ctx, &rows, `SELECT `+cols+` FROM profiles p
		WHERE (tenant_id, profile_id, profile_version) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::int[]))
		  AND `+visibleIn("$4"), tenants, ids, versions, scope.Arg())
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		p := rows[i].fix()
		out[Key{p.TenantID, p.ProfileID, p.ProfileVersion}] = p
	}
	return out, nil
}

// VersionsParent is the parent key of a versions connection: the owner and
// the profile id.
func VersionsParent(owner, profileID string) string {
	return owner + "\x00" + profileID
}

type versionRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Profile
}

// VersionKey reads a versions page's key (the graph's Profile.versions
// cursor holds the last version read, in decimal): a version as this server
// writes it, 1 to 2147483647 without leading zeros or sign, and "" for the
// first page. Any other key is not one this server returned (read as the
// first page, a corrupted cursor started the list again, and a client
// paging on it looped).
func VersionKey(key string) (int, bool) {
	if key == "" {
		return 0, true
	}
	if len(key) > 10 || key[0] == '0' {
		return 0, false
	}
	n := 0
	for _, c := range key {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= math.MaxInt32
}

// VersionPages returns one page of each parent's versions visible in scope
// (ascending) in one statement; shipped profiles come from code.
func VersionPages(ctx context.Context, q store.Q, scope authz.Scope, parents []string, after string, limit int) (page.Rows[Profile], error) {
	from, ok := VersionKey(after)
	if !ok {
		return page.Rows[Profile]{}, errs.Invalid("after", "after is not a cursor this server returned")
	}
	var r page.Rows[Profile]
	var stored []string
	for _, parent := range parents {
		parts := strings.Split(parent, "\x00")
		if len(parts) != 2 {
			continue
		}
		if parts[0] != authz.BuiltinTenant {
			stored = append(stored, parent)
			continue
		}
		var all []Profile
		for _, b := range builtins {
			if !scope.Has(authz.BuiltinTenant) {
				break
			}
			if b.ProfileID == parts[1] {
				all = append(all, b)
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].ProfileVersion < all[j].ProfileVersion })
		n := 0
		for _, b := range all {
			if b.ProfileVersion > from && n <= limit {
				r.Parents, r.Totals, r.Items = append(r.Parents, parent), append(r.Totals, len(all)), append(r.Items, b)
				n++
			}
		}
	}
	if len(stored) == 0 {
		return r, nil
	}
	var rows []versionRow
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent,
			       (SELECT count(*) FROM profiles p WHERE p.tenant_id = split_part(t.parent, E'\x01', 1)
			          AND p.profile_id = split_part(t.parent, E'\x01', 2) AND `+visibleIn("$4")+`) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count,
		       x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+cols+` FROM profiles p
			WHERE p.tenant_id = split_part(t.parent, E'\x01', 1) AND p.profile_id = split_part(t.parent, E'\x01', 2)
			  AND `+visibleIn("$4")+`
			  AND p.profile_version > $2
			ORDER BY p.profile_version LIMIT $3
		) x`, sep(stored), from, limit+1, scope.Arg())
	if err != nil {
		return r, store.Wrap(err)
	}
	for _, x := range rows {
		x.Profile.fix()
		r.Parents, r.Totals, r.Items = append(r.Parents, unsep(x.Parent)), append(r.Totals, x.Total), append(r.Items, x.Profile)
	}
	return r, nil
}

// CountVersions counts each parent's versions visible in scope.
func CountVersions(ctx context.Context, q store.Q, scope authz.Scope, parents []string) (map[string]int, error) {
	out := map[string]int{}
	var stored []string
	for _, parent := range parents {
		parts := strings.Split(parent, "\x00")
		if len(parts) == 2 && parts[0] == authz.BuiltinTenant {
			for _, b := range builtins {
				if b.ProfileID == parts[1] && scope.Has(authz.BuiltinTenant) {
					out[parent]++
				}
			}
			continue
		}
		stored = append(stored, parent)
	}
	if len(stored) == 0 {
		return out, nil
	}
	m, err := store.CountBy(ctx, q, `SELECT t.parent AS k, (SELECT count(*) FROM profiles p
			WHERE p.tenant_id = split_part(t.parent, E'\x01', 1) AND p.profile_id = split_part(t.parent, E'\x01', 2)
			  AND `+visibleIn("$2")+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, sep(stored), scope.Arg())
	for k, v := range m {
		out[unsep(k)] = v
	}
	return out, err
}

// PostgreSQL text cannot hold NUL: parents travel with \x01 separators.
func sep(parents []string) []string {
	out := make([]string, len(parents))
	for i, p := range parents {
		out[i] = strings.ReplaceAll(p, "\x00", "\x01")
	}
	return out
}

func unsep(p string) string { return strings.ReplaceAll(p, "\x01", "\x00") }
