package inventory

import (
	"cmp"
	"slices"
	"sort"
)

// Change types, exactly as the contract names them, in output order.
const (
	GPUMissing       = "gpu.missing"
	GPUAdded         = "gpu.added"
	DiskReplaced     = "disk.replaced"
	DriverChanged    = "driver.changed"
	MIGLayoutChanged = "mig.layout.changed"
)

var typeRank = map[string]int{GPUMissing: 0, GPUAdded: 1, DiskReplaced: 2, DriverChanged: 3, MIGLayoutChanged: 4}

// Change is one difference between two reports.
type Change struct {
	Type     string `json:"type" schema:"InventoryChangeType" doc:"What changed."`
	DeviceID string `json:"deviceId" doc:"The device's stable id: a GPU's UUID, a disk's WWN or a driver's name."`
	Before   any    `json:"before" schema:"InventoryChangeValue" doc:"The device or value before the change; null where it was absent."`
	After    any    `json:"after" schema:"InventoryChangeValue" doc:"The device or value after the change; null where it is absent."`
}

// keyed is a change with its tie-breaker: changes of one type and device id
// (a disk that moved between slots leaves one and arrives in another) are
// ordered by the position they concern.
type keyed struct {
	Change
	order string
}

// MIGLayout is the before or after value of a mig.layout.changed change.
// MigMode is nil when the GPU did not report it; MigDevices is never nil.
type MIGLayout struct {
	MigMode    *string     `json:"migMode" doc:"The GPU's MIG mode (enabled or disabled); null when it did not report one."`
	MigDevices []MIGDevice `json:"migDevices" doc:"The GPU's MIG devices (empty when none)."`
}

// Diff returns the changes from before to after, ordered by type (in the
// order of the constants above), then device id. A nil before diffs against
// nothing and gives no changes; a nil after is an empty report. The result is
// never nil. Before and After hold a GPU (gpu.*), a Disk (disk.replaced), a
// version string (driver.changed), a MIGLayout (mig.layout.changed), or nil.
func Diff(before, after *Sections) []Change {
	if before == nil {
		return []Change{}
	}
	if after == nil {
		after = &Sections{}
	}
	var ks []keyed
	ks = diffGPUs(ks, before.GPUs, after.GPUs)
	ks = diffDisks(ks, before.Disks, after.Disks)
	ks = diffDrivers(ks, before.Drivers, after.Drivers)
	slices.SortStableFunc(ks, func(a, b keyed) int {
		return cmp.Or(
			cmp.Compare(typeRank[a.Type], typeRank[b.Type]),
			cmp.Compare(a.DeviceID, b.DeviceID),
			cmp.Compare(a.order, b.order),
		)
	})
	changes := make([]Change, len(ks))
	for i := range ks {
		changes[i] = ks[i].Change
	}
	return changes
}

func diffGPUs(changes []keyed, before, after []GPU) []keyed {
	old := make(map[string]*GPU, len(before))
	for i := range before {
		old[deviceKey(before[i].UUID)] = &before[i]
	}
	seen := make(map[string]bool, len(after))
	for i := range after {
		a := &after[i]
		seen[deviceKey(a.UUID)] = true
		b, ok := old[deviceKey(a.UUID)]
		if !ok {
			changes = append(changes, keyed{Change: Change{Type: GPUAdded, DeviceID: a.UUID, Before: nil, After: *a}})
			continue
		}
		if !sameMIG(b, a) {
			changes = append(changes, keyed{Change: Change{Type: MIGLayoutChanged, DeviceID: a.UUID, Before: layout(b), After: layout(a)}})
		}
	}
	for i := range before {
		if b := &before[i]; !seen[deviceKey(b.UUID)] {
			changes = append(changes, keyed{Change: Change{Type: GPUMissing, DeviceID: b.UUID, Before: *b, After: nil}})
		}
	}
	return changes
}

func layout(g *GPU) MIGLayout {
	l := MIGLayout{MigDevices: make([]MIGDevice, len(g.MigDevices))}
	copy(l.MigDevices, g.MigDevices)
	if g.MigMode != "" {
		m := g.MigMode
		l.MigMode = &m
	}
	return l
}

// sameMIG compares migMode and the set of {profile, uuid} of two GPUs.
func sameMIG(a, b *GPU) bool {
	if a.MigMode != b.MigMode || len(a.MigDevices) != len(b.MigDevices) {
		return false
	}
	key := func(m MIGDevice) MIGDevice { return MIGDevice{Profile: m.Profile, UUID: deviceKey(m.UUID)} }
	set := make(map[MIGDevice]int, len(a.MigDevices))
	for _, m := range a.MigDevices {
		set[key(m)]++
	}
	for _, m := range b.MigDevices {
		if set[key(m)] == 0 {
			return false
		}
		set[key(m)]--
	}
	return true
}

// diffDisks matches disks by slot; disks without a slot match by WWN among
// the disks without a slot. A slot whose WWN changed, or a position that
// gained or lost a disk, is one disk.replaced change.
func diffDisks(changes []keyed, before, after []Disk) []keyed {
	type pos struct{ b, a *Disk }
	slots := map[string]*pos{}
	loose := map[string]*pos{}
	at := func(d *Disk) *pos {
		m, k := slots, d.Slot
		if k == "" {
			m, k = loose, deviceKey(d.WWN)
		}
		p := m[k]
		if p == nil {
			p = &pos{}
			m[k] = p
		}
		return p
	}
	for i := range before {
		at(&before[i]).b = &before[i]
	}
	for i := range after {
		at(&after[i]).a = &after[i]
	}
	emit := func(order string, p *pos) {
		switch {
		case p.b != nil && p.a != nil:
			if deviceKey(p.b.WWN) != deviceKey(p.a.WWN) {
				changes = append(changes, keyed{Change{Type: DiskReplaced, DeviceID: p.a.WWN, Before: *p.b, After: *p.a}, order})
			}
		case p.a != nil:
			changes = append(changes, keyed{Change{Type: DiskReplaced, DeviceID: p.a.WWN, Before: nil, After: *p.a}, order})
		case p.b != nil:
			changes = append(changes, keyed{Change{Type: DiskReplaced, DeviceID: p.b.WWN, Before: *p.b, After: nil}, order})
		}
	}
	for _, k := range sortedKeys(slots) {
		emit("slot:"+k, slots[k])
	}
	for _, k := range sortedKeys(loose) {
		emit("wwn:"+k, loose[k])
	}
	return changes
}

func diffDrivers(changes []keyed, before, after map[string]string) []keyed {
	names := make(map[string]bool, len(before)+len(after))
	for k := range before {
		names[k] = true
	}
	for k := range after {
		names[k] = true
	}
	for _, name := range sortedKeys(names) {
		b, inB := before[name]
		a, inA := after[name]
		if inB && inA && a == b {
			continue
		}
		c := Change{Type: DriverChanged, DeviceID: name}
		if inB {
			c.Before = b
		}
		if inA {
			c.After = a
		}
		changes = append(changes, keyed{Change: c})
	}
	return changes
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
