package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// Profiles through the graph: the mutations share the method surface's
// validation, and Profile carries its validation and rendered steps.
func TestProfilesGraphQL(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	doc := map[string]any{
		"id": "gpu-node", "version": 1, "name": "GPU node",
		"image":   map[string]any{"url": "https://images.example/noble.raw.zst", "sha256": strings.Repeat("a", 64), "format": "raw"},
		"drivers": []any{map[string]any{"name": "nvidia", "version": "570.86.15"}},
		"steps":   []any{map[string]any{"name": "wipe", "use": "disk.wipe", "with": map[string]any{"devices": []any{"/dev/nvme0n1"}}}, map[string]any{"use": "os.install"}, map[string]any{"use": "drivers.install"}},
	}
	create := `mutation($in: CreateProfileInput!) { createProfile(input: $in) { profile { id profileId profileVersion visibility used validation { valid } } } }`
	r := e.GraphQL(member, create, map[string]any{"in": map[string]any{"tenantId": "acme", "document": doc}})
	if r.Status != 200 || r.Body["errors"] != nil || !strings.Contains(string(r.Raw), `"valid":true`) {
		t.Fatalf("createProfile: %s", r.Raw)
	}
	// The same rule as profiles.create: the first offending field.
	bad := map[string]any{"id": "gpu-node", "version": 2, "name": "x", "steps": []any{map[string]any{"name": 5, "use": "disk.wipe"}}}
	r = e.GraphQL(member, create, map[string]any{"in": map[string]any{"tenantId": "acme", "document": bad}})
	if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), `"path":"document.steps[0].name"`) {
		t.Fatalf("invalid document: %s", r.Raw)
	}
	r = e.GraphQL(viewer, create, map[string]any{"in": map[string]any{"tenantId": "acme", "document": doc}})
	if code, _ := gqlErrorCode(r); code != "PERMISSION_DENIED" {
		t.Fatalf("viewer createProfile: %s", r.Raw)
	}

	q := `query { tenant(tenantId: "acme") {
		profiles(first: 200) { edges { cursor node { tenantId profileId profileVersion } } }
		profile(profileId: "gpu-node") { id profileVersion rendered { index use phase } validation { valid issues { path code } } }
	} }`
	r = e.GraphQL(admin, q, nil)
	if r.Status != 200 || r.Body["errors"] != nil {
		t.Fatalf("tenant profiles: %s", r.Raw)
	}
	var out struct {
		Data struct {
			Tenant struct {
				Profiles struct {
					Edges []struct {
						Cursor string
						Node   struct{ TenantID, ProfileID string }
					}
				}
				Profile struct {
					ID       string
					Rendered []struct {
						Index      int
						Use, Phase string
					}
				}
			}
		}
	}
	if err := json.Unmarshal(r.Raw, &out); err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, ed := range out.Data.Tenant.Profiles.Edges {
		owners[ed.Node.TenantID] = true
	}
	if !owners["acme"] || !owners["builtin"] {
		t.Fatalf("profiles should mix own and builtin: %s", r.Raw)
	}
	steps := out.Data.Tenant.Profile.Rendered
	if len(steps) < 5 || steps[0].Use != "disk.wipe" || steps[0].Phase != "PREPARE" {
		t.Fatalf("rendered steps: %s", r.Raw)
	}
	// Paging with a cursor from an edge resumes after it.
	first := out.Data.Tenant.Profiles.Edges[0]
	r = e.GraphQL(admin, `query($a: String) { tenant(tenantId: "acme") { profiles(first: 1, after: $a) { edges { node { profileId tenantId } } } } }`, map[string]any{"a": first.Cursor})
	if r.Status != 200 || r.Body["errors"] != nil || strings.Contains(string(r.Raw), `"profileId":"`+first.Node.ProfileID+`","tenantId":"`+first.Node.TenantID+`"`) {
		t.Fatalf("after cursor: %s", r.Raw)
	}
	// node(id:) finds it for a reader of the owner tenant, not for another tenant.
	other, _, _ := e.Tenant("other")
	nq := `query($id: ID!) { node(id: $id) { ... on Profile { profileId } } }`
	if r = e.GraphQL(viewer, nq, map[string]any{"id": out.Data.Tenant.Profile.ID}); !strings.Contains(string(r.Raw), `"profileId":"gpu-node"`) {
		t.Fatalf("node for a reader: %s", r.Raw)
	}
	if r = e.GraphQL(other, nq, map[string]any{"id": out.Data.Tenant.Profile.ID}); !strings.Contains(string(r.Raw), `"node":null`) {
		t.Fatalf("node for another tenant: %s", r.Raw)
	}
	// updateProfile and deleteProfile go through the same rules.
	r = e.GraphQL(member, `mutation { updateProfile(input: {tenantId: "acme", profileId: "gpu-node", profileVersion: 1, visibility: PUBLIC, expectedVersion: 9}) { profile { rowVersion } } }`, nil)
	if code, _ := gqlErrorCode(r); code != "CONFLICT" {
		t.Fatalf("stale expectedVersion: %s", r.Raw)
	}
	r = e.GraphQL(member, `mutation { deleteProfile(input: {tenantId: "acme", profileId: "gpu-node"}) { deleted } }`, nil)
	if !strings.Contains(string(r.Raw), `"deleted":1`) {
		t.Fatalf("deleteProfile: %s", r.Raw)
	}
}
