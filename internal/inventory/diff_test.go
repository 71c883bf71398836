package inventory

import (
	"encoding/json"
	"reflect"
	"testing"
)

func decoded(t testing.TB, raw string) *Sections {
	t.Helper()
	s, _, _, err := Decode([]byte(raw))
	if err != nil {
		t.Fatalf("Decode(%s): %v", raw, err)
	}
	return s
}

// changesJSON renders changes as the method surface does.
func changesJSON(t *testing.T, c []Change) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDiffNilBefore(t *testing.T) {
	got := Diff(nil, decoded(t, string(fixture(t))))
	if got == nil || len(got) != 0 {
		t.Fatalf("Diff(nil, x) = %#v, want an empty non-nil slice", got)
	}
	if s := changesJSON(t, got); s != "[]" {
		t.Fatalf("JSON %s", s)
	}
}

func TestDiffIdentical(t *testing.T) {
	a := decoded(t, string(fixture(t)))
	b := decoded(t, string(reorder(t, fixture(t))))
	if got := Diff(a, b); got == nil || len(got) != 0 {
		t.Fatalf("Diff of equal reports = %v", got)
	}
	if got := Diff(&Sections{}, &Sections{}); got == nil || len(got) != 0 {
		t.Fatalf("Diff of empty reports = %v", got)
	}
}

func TestDiffNilAfter(t *testing.T) {
	got := Diff(decoded(t, `{"gpus":[{"uuid":"GPU-1"}],"drivers":{"nvidia":"1"}}`), nil)
	want := `[{"type":"gpu.missing","deviceId":"GPU-1","before":{"uuid":"GPU-1"},"after":null},` +
		`{"type":"driver.changed","deviceId":"nvidia","before":"1","after":null}]`
	if s := changesJSON(t, got); s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
}

func TestDiffGPUs(t *testing.T) {
	before := decoded(t, `{"gpus":[
		{"uuid":"GPU-a","index":0,"model":"NVIDIA H100 80GB HBM3"},
		{"uuid":"GPU-b","index":1,"model":"NVIDIA H100 80GB HBM3"},
		{"uuid":"GPU-c","index":2,"model":"NVIDIA H100 80GB HBM3"}]}`)
	// GPU-b fell off the bus, GPU-c was swapped for GPU-d, GPU-a moved index
	// (not a change type).
	after := decoded(t, `{"gpus":[
		{"uuid":"GPU-d","index":2,"model":"NVIDIA H100 80GB HBM3"},
		{"uuid":"GPU-a","index":1,"model":"NVIDIA H100 80GB HBM3"}]}`)
	got := Diff(before, after)
	want := []Change{
		{Type: "gpu.missing", DeviceID: "GPU-b", Before: before.GPUs[1], After: nil},
		{Type: "gpu.missing", DeviceID: "GPU-c", Before: before.GPUs[2], After: nil},
		{Type: "gpu.added", DeviceID: "GPU-d", Before: nil, After: after.GPUs[0]},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %s\nwant %s", changesJSON(t, got), changesJSON(t, want))
	}
	// The JSON keeps index 0.
	if s := changesJSON(t, Diff(after, before)); s != `[{"type":"gpu.missing","deviceId":"GPU-d","before":{"uuid":"GPU-d","index":2,"model":"NVIDIA H100 80GB HBM3"},"after":null},`+
		`{"type":"gpu.added","deviceId":"GPU-b","before":null,"after":{"uuid":"GPU-b","index":1,"model":"NVIDIA H100 80GB HBM3"}},`+
		`{"type":"gpu.added","deviceId":"GPU-c","before":null,"after":{"uuid":"GPU-c","index":2,"model":"NVIDIA H100 80GB HBM3"}}]` {
		t.Fatalf("reverse: %s", s)
	}
	if s := changesJSON(t, Diff(&Sections{}, decoded(t, `{"gpus":[{"uuid":"GPU-z","index":0}]}`))); s != `[{"type":"gpu.added","deviceId":"GPU-z","before":null,"after":{"uuid":"GPU-z","index":0}}]` {
		t.Fatalf("index 0: %s", s)
	}
}

func TestDiffDisks(t *testing.T) {
	before := decoded(t, `{"disks":[
		{"wwn":"eui.01","slot":"nvme0","sizeBytes":3840755982336},
		{"wwn":"eui.02","slot":"nvme1"},
		{"wwn":"eui.03","slot":"nvme2"},
		{"wwn":"eui.04","slot":"nvme3"},
		{"wwn":"usb.boot"},
		{"wwn":"usb.old"}]}`)
	after := decoded(t, `{"disks":[
		{"wwn":"eui.01","slot":"nvme0","sizeBytes":3840755982336},
		{"wwn":"eui.22","slot":"nvme1"},
		{"wwn":"eui.04","slot":"nvme3"},
		{"wwn":"eui.05","slot":"nvme4"},
		{"wwn":"usb.boot","slot":""},
		{"wwn":"usb.new"}]}`)
	got := Diff(before, after)
	want := []Change{
		// nvme2: the disk left.
		{Type: "disk.replaced", DeviceID: "eui.03", Before: before.Disks[2], After: nil},
		// nvme4: a disk arrived.
		{Type: "disk.replaced", DeviceID: "eui.05", Before: nil, After: after.Disks[3]},
		// nvme1: replaced in place; the device id is the new disk's WWN.
		{Type: "disk.replaced", DeviceID: "eui.22", Before: before.Disks[1], After: after.Disks[1]},
		// Unslotted disks match by WWN.
		{Type: "disk.replaced", DeviceID: "usb.new", Before: nil, After: after.Disks[5]},
		{Type: "disk.replaced", DeviceID: "usb.old", Before: before.Disks[5], After: nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %s\nwant %s", changesJSON(t, got), changesJSON(t, want))
	}
}

func TestDiffDiskMovedBetweenSlots(t *testing.T) {
	before := decoded(t, `{"disks":[{"wwn":"eui.01","slot":"nvme0"}]}`)
	after := decoded(t, `{"disks":[{"wwn":"eui.01","slot":"nvme1"}]}`)
	// nvme0 lost its disk and nvme1 gained it: two changes with one device
	// id, ordered by slot.
	want := `[{"type":"disk.replaced","deviceId":"eui.01","before":{"wwn":"eui.01","slot":"nvme0"},"after":null},` +
		`{"type":"disk.replaced","deviceId":"eui.01","before":null,"after":{"wwn":"eui.01","slot":"nvme1"}}]`
	for i := 0; i < 20; i++ {
		if s := changesJSON(t, Diff(before, after)); s != want {
			t.Fatalf("got  %s\nwant %s", s, want)
		}
	}
}

func TestDiffDrivers(t *testing.T) {
	before := decoded(t, `{"drivers":{"nvidia":"550.90.07","cuda":"12.4","mlx5_core":"24.04-0.6.6"},"firmware":{"bios":"1.6.6"}}`)
	after := decoded(t, `{"drivers":{"nvidia":"570.86.15","cuda":"12.4","nvidia-fabricmanager":"570.86.15"},"firmware":{"bios":"1.7.0"}}`)
	got := Diff(before, after)
	want := []Change{
		{Type: "driver.changed", DeviceID: "mlx5_core", Before: "24.04-0.6.6", After: nil},
		{Type: "driver.changed", DeviceID: "nvidia", Before: "550.90.07", After: "570.86.15"},
		{Type: "driver.changed", DeviceID: "nvidia-fabricmanager", Before: nil, After: "570.86.15"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %s\nwant %s", changesJSON(t, got), changesJSON(t, want))
	}
}

func TestDiffMIG(t *testing.T) {
	before := decoded(t, `{"gpus":[
		{"uuid":"GPU-a","migMode":"disabled"},
		{"uuid":"GPU-b","migMode":"enabled","migDevices":[{"profile":"3g.40gb","uuid":"MIG-1"},{"profile":"3g.40gb","uuid":"MIG-2"}]},
		{"uuid":"GPU-c","migMode":"enabled","migDevices":[{"profile":"1g.10gb","uuid":"MIG-3"},{"profile":"2g.20gb","uuid":"MIG-4"}]},
		{"uuid":"GPU-d"}]}`)
	after := decoded(t, `{"gpus":[
		{"uuid":"GPU-a","migMode":"enabled","migDevices":[{"profile":"7g.80gb","uuid":"MIG-9"}]},
		{"uuid":"GPU-b","migMode":"enabled","migDevices":[{"profile":"3g.40gb","uuid":"MIG-2"},{"profile":"3g.40gb","uuid":"MIG-1"}]},
		{"uuid":"GPU-c","migMode":"enabled","migDevices":[{"profile":"1g.10gb","uuid":"MIG-3"},{"profile":"1g.10gb","uuid":"MIG-4"}]},
		{"uuid":"GPU-d","migMode":"disabled"}]}`)
	// GPU-b only reordered its devices: no change.
	want := `[{"type":"mig.layout.changed","deviceId":"GPU-a","before":{"migMode":"disabled","migDevices":[]},"after":{"migMode":"enabled","migDevices":[{"profile":"7g.80gb","uuid":"MIG-9"}]}},` +
		`{"type":"mig.layout.changed","deviceId":"GPU-c","before":{"migMode":"enabled","migDevices":[{"profile":"1g.10gb","uuid":"MIG-3"},{"profile":"2g.20gb","uuid":"MIG-4"}]},"after":{"migMode":"enabled","migDevices":[{"profile":"1g.10gb","uuid":"MIG-3"},{"profile":"1g.10gb","uuid":"MIG-4"}]}},` +
		`{"type":"mig.layout.changed","deviceId":"GPU-d","before":{"migMode":null,"migDevices":[]},"after":{"migMode":"disabled","migDevices":[]}}]`
	if s := changesJSON(t, Diff(before, after)); s != want {
		t.Fatalf("got  %s\nwant %s", s, want)
	}
	got := Diff(before, after)
	if l, ok := got[0].Before.(MIGLayout); !ok || l.MigMode == nil || *l.MigMode != "disabled" {
		t.Fatalf("before is %T %+v", got[0].Before, got[0].Before)
	}
}

// TestDiffDeviceIDsIgnoreCase: a daemon whose tool prints a device's id in
// the other case (an upgrade of nvidia-smi or lsblk) reports the same
// devices; nothing went missing and nothing was replaced.
func TestDiffDeviceIDsIgnoreCase(t *testing.T) {
	before := decoded(t, `{"gpus":[{"uuid":"GPU-5f3b2c1e-8a4d","migMode":"enabled","migDevices":[{"profile":"3g.40gb","uuid":"MIG-ab12"}]}],
		"disks":[{"wwn":"naa.5000c500a1b2c3d4","slot":"nvme0"},{"wwn":"eui.00a1"}]}`)
	after := decoded(t, `{"gpus":[{"uuid":"GPU-5F3B2C1E-8A4D","migMode":"enabled","migDevices":[{"profile":"3g.40gb","uuid":"MIG-AB12"}]}],
		"disks":[{"wwn":"NAA.5000C500A1B2C3D4","slot":"nvme0"},{"wwn":"EUI.00A1"}]}`)
	if got := Diff(before, after); len(got) != 0 {
		t.Fatalf("a change of case is %s", changesJSON(t, got))
	}
}

// TestDiffOrder checks every type in one diff comes out in the contract's
// order, then by device id.
func TestDiffOrder(t *testing.T) {
	before := decoded(t, `{
		"drivers":{"nvidia":"1","cuda":"1"},
		"disks":[{"wwn":"w1","slot":"s1"},{"wwn":"w2","slot":"s2"}],
		"gpus":[{"uuid":"GPU-z"},{"uuid":"GPU-y"},{"uuid":"GPU-m","migMode":"disabled"},{"uuid":"GPU-l","migMode":"disabled"}]}`)
	after := decoded(t, `{
		"gpus":[{"uuid":"GPU-l","migMode":"enabled"},{"uuid":"GPU-m","migMode":"enabled"},{"uuid":"GPU-b"},{"uuid":"GPU-a"}],
		"disks":[{"wwn":"w4","slot":"s2"},{"wwn":"w3","slot":"s1"}],
		"drivers":{"nvidia":"2","cuda":"2"}}`)
	var got []string
	for _, c := range Diff(before, after) {
		got = append(got, c.Type+" "+c.DeviceID)
	}
	want := []string{
		"gpu.missing GPU-y", "gpu.missing GPU-z",
		"gpu.added GPU-a", "gpu.added GPU-b",
		"disk.replaced w3", "disk.replaced w4",
		"driver.changed cuda", "driver.changed nvidia",
		"mig.layout.changed GPU-l", "mig.layout.changed GPU-m",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func BenchmarkDiff(b *testing.B) {
	before := decoded(b, string(fixture(b)))
	after := decoded(b, string(fixture(b)))
	// A realistic change: one GPU swapped, one disk replaced, a driver upgrade
	// and one GPU switched to MIG.
	after.GPUs[3].UUID = "GPU-00000000-0000-4000-8000-000000000003"
	after.Disks[1].WWN = "eui.36344730526015990025384500000001"
	after.Drivers = map[string]string{"nvidia": "570.86.15", "cuda": "12.8"}
	after.GPUs[7].MigMode = "enabled"
	after.GPUs[7].MigDevices = []MIGDevice{{Profile: "3g.40gb", UUID: "MIG-1"}, {Profile: "3g.40gb", UUID: "MIG-2"}}
	if n := len(Diff(before, after)); n != 6 {
		b.Fatalf("%d changes", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		Diff(before, after)
	}
}
