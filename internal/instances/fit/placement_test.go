package fit

import (
	"fmt"
	"testing"

	"github.com/bettercompute/computed/internal/inventory"
)

func gpus(node string, n int, mig ...string) []inventory.GPU {
	out := make([]inventory.GPU, n)
	for k := range out {
		out[k] = inventory.GPU{UUID: fmt.Sprintf("GPU-%s-%d", node, k)}
		for m, p := range mig {
			out[k].MigMode = "enabled"
			out[k].MigDevices = append(out[k].MigDevices, inventory.MIGDevice{Profile: p, UUID: fmt.Sprintf("MIG-%s-%d-%d", node, k, m)})
		}
	}
	return out
}

func host(id string, g []inventory.GPU, taken ...string) Host {
	h := Host{NodeID: id, GPUs: g, VCPUs: 64, MemoryGiB: 512, Taken: map[string]bool{}}
	for _, d := range taken {
		h.Taken[d] = true
	}
	return h
}

func TestPlace(t *testing.T) {
	cases := []struct {
		name    string
		mode    string
		slices  int
		hosts   []Host
		size    Resources
		profile string
		node    string
		devices []string
	}{
		{"exclusive picks free GPUs", Exclusive, 0, []Host{host("a", gpus("a", 4), "GPU-a-0")}, Resources{GPUs: 2, VCPUs: 4, MemoryGiB: 8}, "",
			"a", []string{"GPU-a-1", "GPU-a-2"}},
		{"exclusive best fit", Exclusive, 0, []Host{host("a", gpus("a", 8)), host("b", gpus("b", 8), "GPU-b-0", "GPU-b-1", "GPU-b-2", "GPU-b-3", "GPU-b-4")},
			Resources{GPUs: 2, VCPUs: 4, MemoryGiB: 8}, "", "b", []string{"GPU-b-5", "GPU-b-6"}},
		{"exclusive no room", Exclusive, 0, []Host{host("a", gpus("a", 2), "GPU-a-0")}, Resources{GPUs: 2, VCPUs: 4, MemoryGiB: 8}, "", "", nil},
		{"zero GPUs", Exclusive, 0, []Host{host("a", gpus("a", 1), "GPU-a-0")}, Resources{GPUs: 0, VCPUs: 4, MemoryGiB: 8}, "", "a", []string{}},
		{"vcpus bound", Exclusive, 0, []Host{func() Host { h := host("a", gpus("a", 8)); h.UsedVCPUs = 62; return h }(), host("b", gpus("b", 8))},
			Resources{GPUs: 1, VCPUs: 4, MemoryGiB: 8}, "", "b", []string{"GPU-b-0"}},
		{"memory bound", Exclusive, 0, []Host{func() Host { h := host("a", gpus("a", 8)); h.UsedMemoryGiB = 500; return h }()},
			Resources{GPUs: 1, VCPUs: 4, MemoryGiB: 16}, "", "", nil},
		{"mig by profile", MIG, 0, []Host{host("a", gpus("a", 2, "3g.40gb", "1g.10gb", "1g.10gb"), "MIG-a-0-1")},
			Resources{GPUs: 2, VCPUs: 4, MemoryGiB: 8}, "1g.10gb", "a", []string{"MIG-a-0-2", "MIG-a-1-1"}},
		{"mig no such profile", MIG, 0, []Host{host("a", gpus("a", 2, "3g.40gb"))},
			Resources{GPUs: 1, VCPUs: 4, MemoryGiB: 8}, "1g.10gb", "", nil},
		{"time slices on distinct GPUs", TimeSliced, 4, []Host{host("a", gpus("a", 2), "GPU-a-0/0")},
			Resources{GPUs: 2, VCPUs: 4, MemoryGiB: 8}, "", "a", []string{"GPU-a-0/1", "GPU-a-1/0"}},
		{"time slices: more than GPUs", TimeSliced, 4, []Host{host("a", gpus("a", 2))}, Resources{GPUs: 3, VCPUs: 4, MemoryGiB: 8}, "", "", nil},
		{"time slices exhausted on one GPU", TimeSliced, 2, []Host{host("a", gpus("a", 2), "GPU-a-0/0", "GPU-a-0/1")},
			Resources{GPUs: 1, VCPUs: 4, MemoryGiB: 8}, "", "a", []string{"GPU-a-1/0"}},
	}
	for _, c := range cases {
		node, devs, reason := Place(c.mode, c.slices, c.hosts, c.size, c.profile)
		if node != c.node {
			t.Errorf("%s: node %q, want %q (%s)", c.name, node, c.node, reason)
			continue
		}
		if node == "" {
			if reason == "" {
				t.Errorf("%s: no reason", c.name)
			}
			continue
		}
		if len(devs) != len(c.devices) {
			t.Errorf("%s: devices %v, want %v", c.name, devs, c.devices)
			continue
		}
		for k, d := range devs {
			if d.DeviceID != c.devices[k] {
				t.Errorf("%s: devices %v, want %v", c.name, devs, c.devices)
			}
		}
	}
	if got := HostTotal(TimeSliced, 4, host("a", gpus("a", 2))); got != (Resources{8, 64, 512}) {
		t.Errorf("time-sliced total: %v", got)
	}
	if got := HostTotal(MIG, 0, host("a", gpus("a", 2, "3g.40gb", "1g.10gb"))); got.GPUs != 4 {
		t.Errorf("mig total: %v", got)
	}
}

// A device an instance holds that the host's latest inventory no longer
// lists stays in the host's total, held; the devices that are there are
// free as they are (the total fell below what was held, and a new GPU sat
// idle).
func TestVanishedDevicesStayCountedWhileHeld(t *testing.T) {
	// Two GPUs held; GPU-a-1 vanished and GPU-a-2 appeared.
	g := []inventory.GPU{{UUID: "GPU-a-0"}, {UUID: "GPU-a-2"}}
	h := host("a", g, "GPU-a-0", "GPU-a-1")
	if got := HostTotal(Exclusive, 0, h).GPUs; got != 3 {
		t.Fatalf("exclusive total %d, want 3 (two present, one held that vanished)", got)
	}
	if node, devs, _ := Place(Exclusive, 0, []Host{h}, Resources{GPUs: 1}, ""); node != "a" || len(devs) != 1 || devs[0].DeviceID != "GPU-a-2" {
		t.Fatalf("placed %q %v, want the new GPU", node, devs)
	}
	// Time slices of a vanished GPU, held, count one each.
	ts := host("a", g, "GPU-a-0/0", "GPU-a-1/0", "GPU-a-1/1")
	if got := HostTotal(TimeSliced, 2, ts).GPUs; got != 6 {
		t.Fatalf("time-sliced total %d, want 6 (four slices present, two held that vanished)", got)
	}
	// vCPUs and memory reported below what instances hold: the host's
	// total is what they hold, so nothing is free and nothing negative.
	shrunk := host("a", g, "GPU-a-0")
	shrunk.VCPUs, shrunk.MemoryGiB, shrunk.UsedVCPUs, shrunk.UsedMemoryGiB = 4, 8, 12, 48
	if got := HostTotal(Exclusive, 0, shrunk); got.VCPUs != 12 || got.MemoryGiB != 48 {
		t.Fatalf("shrunk host's total %+v, want 12 vCPUs and 48 GiB", got)
	}
	// Nothing vanished: the inventory's devices.
	if got := HostTotal(Exclusive, 0, host("a", g, "GPU-a-0")).GPUs; got != 2 {
		t.Fatalf("total %d, want 2", got)
	}
}

// The reason a placement waits says whether freeing room can help: an
// instance larger than every ready host, even empty, waits for a larger
// host, not for room (a probe's 3-GPU instance beside two empty 2-GPU
// hosts was told that none had 3 GPUs free).
func TestPlaceSaysWhenNoHostIsLargeEnough(t *testing.T) {
	two := []Host{host("a", gpus("a", 2)), host("b", gpus("b", 2))}
	for _, c := range []struct {
		name  string
		hosts []Host
		size  Resources
		want  string
	}{
		{"more GPUs than a host", two, Resources{GPUs: 3, VCPUs: 2, MemoryGiB: 4},
			"waiting for capacity: no ready host holds 3 GPUs, 2 vCPUs and 4 GiB even when empty; it waits until a large enough host is ready"},
		{"more vCPUs than a host", two, Resources{GPUs: 0, VCPUs: 65, MemoryGiB: 4},
			"waiting for capacity: no ready host holds 0 GPUs, 65 vCPUs and 4 GiB even when empty; it waits until a large enough host is ready"},
		{"room held", []Host{host("a", gpus("a", 2), "GPU-a-0")}, Resources{GPUs: 2, VCPUs: 2, MemoryGiB: 4},
			"waiting for capacity: no ready host has 2 GPUs, 2 vCPUs and 4 GiB free"},
		{"one of each, counted in the singular", []Host{host("a", gpus("a", 1), "GPU-a-0")}, Resources{GPUs: 1, VCPUs: 1, MemoryGiB: 4},
			"waiting for capacity: no ready host has 1 GPU, 1 vCPU and 4 GiB free"},
	} {
		if node, _, reason := Place(Exclusive, 0, c.hosts, c.size, ""); node != "" || reason != c.want {
			t.Errorf("%s: %q, %q", c.name, node, reason)
		}
	}
}
