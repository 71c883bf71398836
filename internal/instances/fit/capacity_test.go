package fit

import (
	"fmt"
	"testing"

	"github.com/bettercompute/computed/internal/inventory"
)

func TestProviderTotal(t *testing.T) {
	cases := []struct {
		policy  string
		total   Resources
		bounded bool
	}{
		{`{}`, Resources{Unbounded, Unbounded, Unbounded}, false},
		{`not json`, Resources{Unbounded, Unbounded, Unbounded}, false},
		{`{"capacity": {"gpus": 8}}`, Resources{8, Unbounded, Unbounded}, true},
		{`{"capacity": {"gpus": 8, "vcpus": 64, "memoryGiB": 512}}`, Resources{8, 64, 512}, true},
		{`{"capacity": {"gpus": -1, "vcpus": 0}}`, Resources{Unbounded, Unbounded, Unbounded}, false},
	}
	for _, c := range cases {
		total, bounded := ProviderTotal(c.policy)
		if total != c.total || bounded != c.bounded {
			t.Errorf("%s: %v %v, want %v %v", c.policy, total, bounded, c.total, c.bounded)
		}
	}
}

func TestCapacityOf(t *testing.T) {
	total := Resources{GPUs: 8, VCPUs: 64, MemoryGiB: 512}
	alloc := map[string]Resources{"a": {2, 8, 32}, "b": {1, 4, 16}}
	res := map[string]Resources{"b": {4, 16, 64}, "c": {1, 0, 0}}
	c := CapacityOf("pool", total, true, alloc, res, true)
	if c.Allocated != (Resources{3, 12, 48}) {
		t.Errorf("allocated %v", c.Allocated)
	}
	// b's reservation beyond its instances, and c's whole one.
	if c.Reserved != (Resources{4, 12, 48}) {
		t.Errorf("reserved %v", c.Reserved)
	}
	if c.Total == nil || *c.Total != total || c.Free == nil || *c.Free != (Resources{1, 40, 416}) {
		t.Errorf("total %v free %v", c.Total, c.Free)
	}
	if len(c.ByTenant) != 3 || c.ByTenant["b"] != (Resources{4, 16, 64}) || c.ByTenant["a"] != alloc["a"] || c.ByTenant["c"] != res["c"] {
		t.Errorf("by tenant %v", c.ByTenant)
	}
	// A dimension the policy leaves unbounded reads Unbounded in free as
	// in total, whatever instances hold of it.
	gpusOnly, _ := ProviderTotal(`{"capacity": {"gpus": 16}}`)
	c = CapacityOf("pool", gpusOnly, true, alloc, res, true)
	if c.Free == nil || *c.Free != (Resources{GPUs: 16 - 2 - 4 - 1, VCPUs: Unbounded, MemoryGiB: Unbounded}) {
		t.Errorf("one bounded dimension: total %v free %v", c.Total, c.Free)
	}
	// Not the owner: no per-tenant numbers; unbounded: no total, no free.
	c = CapacityOf("pool", total, false, alloc, res, false)
	if c.ByTenant != nil || c.Total != nil || c.Free != nil || c.Allocated != (Resources{3, 12, 48}) {
		t.Errorf("unbounded, not the owner: %+v", c)
	}
}

func TestHostOfAndHostedTotal(t *testing.T) {
	threads, cores, mem := 96, 48, int64(768)<<30
	sec := &inventory.Sections{GPUs: make([]inventory.GPU, 2),
		CPU: &inventory.CPU{Threads: &threads, Cores: &cores}, Memory: &inventory.Memory{TotalBytes: &mem}}
	for k := range sec.GPUs {
		sec.GPUs[k].UUID = fmt.Sprintf("GPU-%d", k)
	}
	h := HostOf("n1", sec, []string{"GPU-0"}, 8, 32)
	if h.VCPUs != 96 || h.MemoryGiB != 768 || h.UsedVCPUs != 8 || h.UsedMemoryGiB != 32 || !h.Taken["GPU-0"] || h.Taken["GPU-1"] {
		t.Errorf("host %+v", h)
	}
	sec.CPU.Threads = nil
	if h := HostOf("n2", sec, nil, 0, 0); h.VCPUs != 48 {
		t.Errorf("cores without threads: %d vCPUs", h.VCPUs)
	}
	got := HostedTotal(TimeSliced, 4, []Host{h, HostOf("n2", sec, nil, 0, 0)})
	if got != (Resources{16, 96 + 48, 1536}) {
		t.Errorf("hosted total %v", got)
	}
}

// Amounts past what an answer holds (reservations of an unbounded
// dimension together) read as Unbounded, the largest.
func TestCapacityAmountsSaturate(t *testing.T) {
	total, _ := ProviderTotal(`{"capacity": {"gpus": 8}}`)
	res := map[string]Resources{"a": {GPUs: 1, MemoryGiB: 1_500_000_000}, "b": {MemoryGiB: 1_500_000_000}}
	c := CapacityOf("pool", total, true, map[string]Resources{}, res, true)
	if c.Reserved.MemoryGiB != Unbounded || c.ByTenant["a"].MemoryGiB != 1_500_000_000 || c.Free.MemoryGiB != Unbounded || c.Free.GPUs != 7 {
		t.Fatalf("%+v free %+v", c, *c.Free)
	}
	// a bound lowered under what is held: free below zero, at most as far
	lowered, _ := ProviderTotal(`{"capacity": {"gpus": 8, "memoryGiB": 1}}`)
	c = CapacityOf("pool", lowered, true, map[string]Resources{}, res, true)
	if c.Free.MemoryGiB != -Unbounded {
		t.Fatalf("free %+v", *c.Free)
	}
}
