package profiles_test

import (
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
