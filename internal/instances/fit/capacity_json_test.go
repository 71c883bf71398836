package fit

import (
	"encoding/json"
	"testing"
)

// TestCapacityJSONSaysWhoseView: instances.capacity's byTenant is an empty
// object for the owner's readers of a pool nobody holds room in, and absent
// for the tenants the pool is offered to (it was absent for both).
func TestCapacityJSONSaysWhoseView(t *testing.T) {
	for _, c := range []struct {
		owner bool
		want  string
	}{
		{true, `{"poolId":"p","bounded":false,"total":null,"allocated":{"gpus":0,"vcpus":0,"memoryGiB":0},"reserved":{"gpus":0,"vcpus":0,"memoryGiB":0},"free":null,"byTenant":{}}`},
		{false, `{"poolId":"p","bounded":false,"total":null,"allocated":{"gpus":0,"vcpus":0,"memoryGiB":0},"reserved":{"gpus":0,"vcpus":0,"memoryGiB":0},"free":null}`},
	} {
		b, err := json.Marshal(CapacityOf("p", Resources{}, false, nil, nil, c.owner))
		if err != nil || string(b) != c.want {
			t.Errorf("owner %v: %s, %v; want %s", c.owner, b, err, c.want)
		}
	}
	held := CapacityOf("p", Resources{GPUs: 4}, true, map[string]Resources{"acme": {GPUs: 1}}, nil, true)
	var back map[string]any
	b, _ := json.Marshal(held)
	if err := json.Unmarshal(b, &back); err != nil || back["byTenant"].(map[string]any)["acme"] == nil {
		t.Errorf("held: %s", b)
	}
}
