package pools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

// The policy's known keys are checked with the schema the OpenAPI document
// gives clients; any other key passes as given.
func TestPolicyChecksKnownKeys(t *testing.T) {
	for _, c := range []struct {
		policy, path string // path "" means valid
	}{
		{`{}`, ""},
		{`{"sim": {"latencyMs": 1500}}`, ""},
		{`{"sim": {"latencyMs": {"create": 100, "delete": 5}, "failureRate": 0.25}, "capacity": {"gpus": 8, "instances": 4}}`, ""},
		{`{"timeouts": {"provisioning": 60}, "maxTries": 3, "timeSlices": 8, "anything": {"else": [1, "x"]}}`, ""},
		{`{"sim": {"latencyMs": "slow"}}`, "policy.sim.latencyMs"},
		{`{"sim": {"latencyMs": 1.5}}`, "policy.sim.latencyMs"},
		{`{"sim": {"latencyMs": {"crate": 1}}}`, "policy.sim.latencyMs.crate"},
		{`{"sim": {"failureRate": 2}}`, "policy.sim.failureRate"},
		{`{"sim": {"latencyMS": 1}}`, "policy.sim.latencyMS"},
		{`{"capacity": {"gpus": -1}}`, "policy.capacity.gpus"},
		{`{"timeouts": {"provisoning": 60}}`, "policy.timeouts.provisoning"},
		{`{"maxTries": 0}`, "policy.maxTries"},
		{`{"timeSlices": "4"}`, "policy.timeSlices"},
		// Numbers past a float64 are judged by the schema at their field
		// (they were "policy must be an object").
		{`{"timeSlices": 1e400}`, "policy.timeSlices"},
		{`{"capacity": {"gpus": 1` + strings.Repeat("0", 400) + `}}`, "policy.capacity.gpus"},
		// At most MaxPolicyBytes as sent (a probe's 680 KB policy of
		// 340,000 numbers cost 0.6 s of CPU, and came back on every read).
		{`{"x": "` + strings.Repeat("a", MaxPolicyBytes-10) + `"}`, ""},
		{`{"x": "` + strings.Repeat("a", MaxPolicyBytes-8) + `"}`, "policy"},
		{`{"x": [` + strings.Repeat("1,", 340000) + `1]}`, "policy"},
	} {
		_, err := policyJSON("policy", json.RawMessage(c.policy))
		switch {
		case c.path == "" && err != nil:
			t.Errorf("%s: refused: %v", c.policy, err)
		case c.path != "" && err == nil:
			t.Errorf("%s: accepted", c.policy)
		case c.path != "":
			e, _ := err.(*errs.Error)
			if e == nil || e.Code != errs.InvalidInput || e.Details["path"] != c.path {
				t.Errorf("%s: %#v, want INVALID_INPUT at %s", c.policy, err, c.path)
			}
		}
	}
}

// A value of the wrong type is refused in the product's words, not the
// schema library's ("got number, want integer").
func TestPolicyTypeWords(t *testing.T) {
	for policy, want := range map[string]string{
		`{"timeSlices": 1.5}`: "policy.timeSlices: must be an integer",
		// Bounds too ("maximum: got 4.611686018427388×10¹⁸, want
		// 8.64×10⁰⁷", a helper's probe).
		`{"sim": {"latencyMs": 4611686018427387904}}`: "policy.sim.latencyMs: must be at most 86400000",
		`{"sim": {"failureRate": 1.5}}`:               "policy.sim.failureRate: must be at most 1",
		`{"capacity": {"gpus": -1}}`:                  "policy.capacity.gpus: must be at least 0",
	} {
		_, err := policyJSON("policy", json.RawMessage(policy))
		if e, _ := err.(*errs.Error); e == nil || e.Message != want {
			t.Errorf("%s: %v, want %q", policy, err, want)
		}
	}
}

// An integral number is stored as an integer however it is spelled (8.0
// was kept "8.0" by jsonb, and the reconciler's int fields read it as
// absent, using their defaults).
func TestPolicyIntegersAreStoredAsIntegers(t *testing.T) {
	got, err := policyJSON("policy", json.RawMessage(`{"timeSlices": 8.0, "maxTries": 3e0, "sim": {"failureRate": 0.25, "latencyMs": {"create": 1.0e2}}, "other": [2.50, 7]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"maxTries":3,"other":[2.50,7],"sim":{"failureRate":0.25,"latencyMs":{"create":100}},"timeSlices":8}`; got != want {
		t.Fatalf("stored %s, want %s", got, want)
	}
}
