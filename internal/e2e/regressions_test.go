package e2e

import (
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// TestRegressions pins bugs these tests found: NUL characters in strings
// (PostgreSQL text cannot hold them) and GraphQL's lenient String coercion.
func TestRegressions(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	cases := []struct {
		name, bug string
		run       func(t *testing.T) bool // true when the contract holds
	}{
		{"NUL in a string field is INVALID_INPUT, not INTERNAL",
			`registry.validateValue accepts "\u0000" in strings; PostgreSQL text rejects it and the call is a 500 INTERNAL (projects.create name/description, tokens.create name, tenants.create name)`,
			func(t *testing.T) bool {
				for _, body := range []string{
					`{"tenantId":"acme","name":"a\u0000b"}`,
					`{"tenantId":"acme","name":"x","description":"a\u0000b"}`,
				} {
					r := env(t, e).Call(acme.Member.Token, "projects/create", body)
					if r.Status != 400 || r.Code() != inv {
						t.Logf("%s -> %d %s", body, r.Status, r.Raw)
						return false
					}
				}
				return true
			}},
		{"GraphQL String variables reject JSON numbers",
			`gqlgen decodes variables with UseNumber; json.Number passes gqlparser's String check and UnmarshalString stringifies it, so createProject(input: {name: 5}) creates a project named "5" where projects.create says INVALID_INPUT path name`,
			func(t *testing.T) bool {
				r := env(t, e).GraphQL(acme.Member.Token, gqlCreateProject, map[string]any{"in": map[string]any{"tenantId": "acme", "name": 5}})
				if errs, _ := r.Body["errors"].([]any); len(errs) == 0 {
					t.Logf("-> %s", r.Raw)
					return false
				}
				return true
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !c.run(t) {
				t.Fatal(c.bug)
			}
		})
	}
}
