package fit

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/bettercompute/computed/internal/inventory"
)

// Sharing modes of a pool.
const (
	Exclusive  = "exclusive"
	MIG        = "mig"
	TimeSliced = "time-sliced"
)

// Host is a ready host node as placement sees it: its GPUs from its latest
// inventory, its vCPUs and memory, and what instances already hold there.
type Host struct {
	NodeID        string
	GPUs          []inventory.GPU
	VCPUs         int
	MemoryGiB     int
	UsedVCPUs     int
	UsedMemoryGiB int
	Taken         map[string]bool // device ids held
}

// Device is one GPU device an instance holds: a whole GPU (its UUID), a MIG
// device (the MIG UUID) or a time slice ("<GPU UUID>/<slice>").
type Device struct {
	DeviceID string `json:"deviceId" doc:"The device: a whole GPU's UUID, a MIG device's UUID, or GPU UUID/slice for a time slice."`
	GPUUUID  string `json:"gpuUuid" doc:"The UUID of the GPU the device is on."`
}

// devices lists a host's GPU devices in a sharing mode, grouped by GPU in
// inventory order.
func devices(mode string, slices int, gpus []inventory.GPU, profile string) [][]Device {
	var out [][]Device
	for _, g := range gpus {
		var ds []Device
		switch mode {
		case Exclusive:
			ds = []Device{{DeviceID: g.UUID, GPUUUID: g.UUID}}
		case MIG:
			for _, m := range g.MigDevices {
				if profile == "" || m.Profile == profile {
					ds = append(ds, Device{DeviceID: m.UUID, GPUUUID: g.UUID})
				}
			}
		case TimeSliced:
			for k := 0; k < slices; k++ {
				ds = append(ds, Device{DeviceID: fmt.Sprintf("%s/%d", g.UUID, k), GPUUUID: g.UUID})
			}
		}
		out = append(out, ds)
	}
	return out
}

// pick chooses n free devices on a host: whole GPUs or MIG devices in
// inventory order; time slices on n distinct GPUs (a VM gets no two slices
// of one GPU). It returns nil when there are not enough.
func pick(mode string, slices int, h Host, n int, profile string) []Device {
	if n == 0 {
		return []Device{}
	}
	var got []Device
	for _, group := range devices(mode, slices, h.GPUs, profile) {
		for _, d := range group {
			if h.Taken[d.DeviceID] {
				continue
			}
			got = append(got, d)
			if mode == TimeSliced {
				break // one slice per GPU
			}
			if len(got) == n {
				return got
			}
		}
		if len(got) == n {
			return got
		}
	}
	return nil
}

// freeDevices counts a host's free devices (for best fit).
func freeDevices(mode string, slices int, h Host) int {
	n := 0
	for _, group := range devices(mode, slices, h.GPUs, "") {
		for _, d := range group {
			if !h.Taken[d.DeviceID] {
				n++
			}
		}
	}
	return n
}

// LargerThanAnyHost reports whether no one of hosts, even with nothing
// placed on it, would hold an instance of size, and the reason it waits
// then: no instance's deletion frees that much on one host (a probe's
// 3-GPU instance waited beside two empty 2-GPU hosts, told that none had 3
// GPUs free, or that the pool's room was held).
func LargerThanAnyHost(mode string, slices int, hosts []Host, size Resources, profile string) (string, bool) {
	for _, h := range hosts {
		empty := h
		empty.Taken, empty.UsedVCPUs, empty.UsedMemoryGiB = map[string]bool{}, 0, 0
		if empty.VCPUs >= size.VCPUs && empty.MemoryGiB >= size.MemoryGiB && pick(mode, slices, empty, size.GPUs, profile) != nil {
			return "", false
		}
	}
	return fmt.Sprintf("waiting for capacity: no ready host holds %s, %s and %d GiB even when empty; it waits until a large enough host is ready",
		sizeWords(mode, size, profile), Count(size.VCPUs, "vCPU", "vCPUs"), size.MemoryGiB), true
}

// sizeWords names an instance's GPUs in the pool's mode.
func sizeWords(mode string, size Resources, profile string) string {
	switch {
	case mode == MIG && profile != "":
		return Count(size.GPUs, "MIG device", "MIG devices") + " of profile " + profile
	case mode == TimeSliced:
		return Count(size.GPUs, "GPU time slice", "GPU time slices")
	}
	return Count(size.GPUs, "GPU", "GPUs")
}

// Count writes n with its noun in the singular or the plural, for the
// messages that count what a size or a quota holds ("1 GPU", "2 GPUs").
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Place chooses a host and devices for an instance: among the hosts with
// enough free devices, vCPUs and memory, the one left with the fewest free
// devices (best fit, so large requests keep finding whole hosts), then the
// fewest free vCPUs, then the lowest node id. size.GPUs counts devices of
// the mode (MIG devices of profile when it is not empty). reason says why
// nothing fits.
func Place(mode string, slices int, hosts []Host, size Resources, profile string) (nodeID string, devs []Device, reason string) {
	type cand struct {
		h    Host
		devs []Device
		left int
		cpu  int
	}
	var cands []cand
	for _, h := range hosts {
		if h.VCPUs-h.UsedVCPUs < size.VCPUs || h.MemoryGiB-h.UsedMemoryGiB < size.MemoryGiB {
			continue
		}
		d := pick(mode, slices, h, size.GPUs, profile)
		if d == nil {
			continue
		}
		cands = append(cands, cand{h, d, freeDevices(mode, slices, h) - len(d), h.VCPUs - h.UsedVCPUs - size.VCPUs})
	}
	if len(cands) == 0 {
		if reason, ok := LargerThanAnyHost(mode, slices, hosts, size, profile); ok {
			return "", nil, reason
		}
		return "", nil, fmt.Sprintf("waiting for capacity: no ready host has %s, %s and %d GiB free", sizeWords(mode, size, profile), Count(size.VCPUs, "vCPU", "vCPUs"), size.MemoryGiB)
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.left != b.left {
			return a.left < b.left
		}
		if a.cpu != b.cpu {
			return a.cpu < b.cpu
		}
		return a.h.NodeID < b.h.NodeID
	})
	return cands[0].h.NodeID, cands[0].devs, ""
}

// HostTotal is a host's capacity in a sharing mode: the devices of its
// latest inventory, and the devices its instances hold that the inventory
// no longer lists (a GPU gone missing); its vCPUs and memory, or what its
// instances hold where that is more. Those stay counted, held, until
// their instances let them go: a pool's total never falls below what its
// instances hold, so the devices that are there are as free as they are
// (a GPU that vanished under an instance made the pool's free room
// negative, and a new GPU sat idle while instances waited).
func HostTotal(mode string, slices int, h Host) Resources {
	n := 0
	for _, g := range devices(mode, slices, h.GPUs, "") {
		n += len(g)
	}
	// Likewise vCPUs and memory: an inventory that reports fewer than the
	// host's instances hold leaves the host's total at what they hold.
	return Resources{GPUs: n + vanished(h), VCPUs: max(h.VCPUs, h.UsedVCPUs), MemoryGiB: max(h.MemoryGiB, h.UsedMemoryGiB)}
}

// vanished counts the devices held on a host whose GPU its inventory no
// longer lists. A device is a GPU's UUID, one of its MIG devices' UUIDs or
// one of its time slices ("<GPU UUID>/<slice>"), in whatever sharing mode
// it was taken.
func vanished(h Host) int {
	if len(h.Taken) == 0 {
		return 0
	}
	present := map[string]bool{}
	for _, g := range h.GPUs {
		present[g.UUID] = true
		for _, m := range g.MigDevices {
			present[m.UUID] = true
		}
	}
	n := 0
	for d, held := range h.Taken {
		gpu, _, sliced := strings.Cut(d, "/")
		if held && !present[d] && !(sliced && present[gpu]) {
			n++
		}
	}
	return n
}

// HostOf is a host's room from its inventory, with the devices and the
// vCPUs and memory its instances hold.
func HostOf(nodeID string, sec *inventory.Sections, taken []string, vcpus, memGiB int) Host {
	h := Host{NodeID: nodeID, GPUs: sec.GPUs, Taken: map[string]bool{}, UsedVCPUs: vcpus, UsedMemoryGiB: memGiB}
	if sec.CPU != nil {
		switch {
		case sec.CPU.Threads != nil:
			h.VCPUs = *sec.CPU.Threads
		case sec.CPU.Cores != nil:
			h.VCPUs = *sec.CPU.Cores
		}
	}
	if sec.Memory != nil && sec.Memory.TotalBytes != nil {
		h.MemoryGiB = int(*sec.Memory.TotalBytes >> 30)
	}
	for _, d := range taken {
		h.Taken[d] = true
	}
	return h
}

// HostedTotal is a hosted pool's capacity: its ready hosts' devices, vCPUs
// and memory.
func HostedTotal(mode string, slices int, hs []Host) Resources {
	var t Resources
	for _, h := range hs {
		t = t.Add(HostTotal(mode, slices, h))
	}
	return t
}
