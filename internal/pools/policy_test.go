package pools

import (
	"encoding/json"
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
