package pools

import (
	"encoding/json"
	"testing"
)

// FuzzPolicy: any policy a client sends is checked without a panic, and
// one that passes is a JSON object.
func FuzzPolicy(f *testing.F) {
	for _, s := range []string{`{}`, `{"sim":{"latencyMs":1500}}`, `{"sim":{"latencyMs":{"create":1}},"capacity":{"gpus":8}}`,
		`{"timeouts":{"provisioning":60},"maxTries":3}`, `[]`, `null`, `{"sim":{"latencyMs":"x"}}`, `{"a":"\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := policyJSON("policy", json.RawMessage(b))
		if err != nil || out == "" {
			return
		}
		var v map[string]any
		if json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("accepted a policy that is no object: %q", b)
		}
	})
}
