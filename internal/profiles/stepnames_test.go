package profiles_test

import (
	"encoding/json"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

// withSteps replaces the document's steps.
func withSteps(steps ...map[string]any) func(map[string]any) {
	return func(d map[string]any) {
		s := make([]any, len(steps))
		for i := range steps {
			s[i] = steps[i]
		}
		d["steps"] = s
	}
}

// A step name follows the product's name rule (registry.Name: not empty,
// no leading or trailing space, ECMA-262's \s): create and update refuse
// one that breaks it, INVALID_INPUT at document.steps[i].name.
func TestStepNamesFollowTheNameRule(t *testing.T) {
	e := newEnv(t)
	e.create("acme", "named", 1, "")
	for _, name := range []string{"   ", " wipe", "wipe ", "\u00a0wipe", "wipe\t"} {
		edit := withSteps(
			map[string]any{"name": "wipe", "use": "disk.wipe", "with": map[string]any{"devices": []any{"/dev/nvme0n1"}}},
			map[string]any{"name": name, "use": "os.install"},
		)
		_, err := profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: doc("spaces", 1, edit)})
		fixture.Code(t, err, errs.InvalidInput, "document.steps[1].name")
		_, err = profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "acme", ProfileID: "named", ProfileVersion: 1, Document: doc("named", 1, edit)})
		fixture.Code(t, err, errs.InvalidInput, "document.steps[1].name")
	}
	// Inner spaces and '/' are fine.
	e.create("acme", "inner", 1, "", withSteps(
		map[string]any{"name": "wipe the disks", "use": "disk.wipe", "with": map[string]any{"devices": []any{"/dev/nvme0n1"}}},
		map[string]any{"name": "base/os", "use": "os.install"},
	))
}

// A version stored before the rule held can still carry such a name:
// validate reports it as an issue at document.steps[i].name and render
// refuses it (INVALID_INPUT, the issue in details.issues).
func TestStoredStepNameIsReported(t *testing.T) {
	e := newEnv(t)
	e.create("acme", "legacy", 1, "")
	var d map[string]any
	if err := json.Unmarshal(doc("legacy", 1), &d); err != nil {
		t.Fatal(err)
	}
	d["steps"].([]any)[0].(map[string]any)["name"] = "   "
	b, _ := json.Marshal(d)
	if _, err := e.DB.ExecContext(e.Ctx, `UPDATE profiles SET document = $1 WHERE tenant_id = 'acme' AND profile_id = 'legacy'`, string(b)); err != nil {
		t.Fatal(err)
	}
	v := fixture.Must(profiles.Validate(e.Ctx, e.DB, ref("acme", "legacy", 1)))
	if v.Valid || len(v.Issues) != 1 || v.Issues[0].Path != "document.steps[0].name" || v.Issues[0].Code != profiles.IssueInvalidName {
		t.Fatalf("validate: %+v", v)
	}
	_, err := profiles.RenderProfile(e.Ctx, e.DB, ref("acme", "legacy", 1))
	fixture.Code(t, err, errs.InvalidInput, "document.steps[0].name")
}

// Every step render returns has its own name: a top-level step named like
// a step another one expands to (os.install/disk.partition next to
// os.install), in either order, or a composite expanding to one name twice
// (two drivers of one name), is DUPLICATE_NAME at the later step.
func TestRenderedStepNamesAreUnique(t *testing.T) {
	e := newEnv(t)
	part := map[string]any{"name": "os.install/disk.partition", "use": "disk.partition"}
	osi := map[string]any{"use": "os.install"}
	for _, c := range []struct {
		id   string
		edit func(map[string]any)
		path string
	}{
		{"named-first", withSteps(part, osi), "document.steps[1].name"},
		{"expanded-first", withSteps(osi, part), "document.steps[1].name"},
		{"drivers-twice", func(d map[string]any) {
			d["drivers"] = []any{map[string]any{"name": "nvidia", "version": "1"}, map[string]any{"name": "nvidia", "version": "2"}}
		}, "document.steps[2].name"},
	} {
		e.create("acme", c.id, 1, "", c.edit)
		v := fixture.Must(profiles.Validate(e.Ctx, e.DB, ref("acme", c.id, 1)))
		found := false
		for _, is := range v.Issues {
			found = found || (is.Path == c.path && is.Code == profiles.IssueDuplicateName)
		}
		if v.Valid || !found {
			t.Errorf("%s: want DUPLICATE_NAME at %s, got %+v", c.id, c.path, v.Issues)
		}
		_, err := profiles.RenderProfile(e.Ctx, e.DB, ref("acme", c.id, 1))
		fixture.Code(t, err, errs.InvalidInput, fixture.AnyPath)
	}
	// The shipped profiles and the usual document still render.
	e.create("acme", "plain", 1, "")
	r := fixture.Must(profiles.RenderProfile(e.Ctx, e.DB, ref("acme", "plain", 1)))
	seen := map[string]bool{}
	for _, s := range r.Steps {
		if seen[s.Name] {
			t.Fatalf("two steps named %s: %+v", s.Name, r.Steps)
		}
		seen[s.Name] = true
	}
}
