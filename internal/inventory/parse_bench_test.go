package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// The report decoder against encoding/json on the same payloads
// (docs/design.md, "Inventory"): parsing alone, without the canonical
// form and its hash, which every choice needs the same way. encoding/json
// checks less than the hand parser does (no limits, no duplicate keys, no
// unique device ids, no paths with array indexes, integers only as Go
// spells them), so its figure is a lower bound for a library decoder
// followed by the checks the report needs.

// migNode is a MIG-partitioned 8-GPU node (7 instances per GPU), 24 disks
// and 8 NICs: a larger report than the H100 fixture, as a daemon writes it
// (compact).
func migNode() []byte {
	n := func(v int) *int { return &v }
	n64 := func(v int64) *int64 { return &v }
	s := Sections{
		System:   &System{Vendor: "Supermicro", Product: "SYS-421GE-TNRT", Serial: "S5A9183X2710", UUID: "00000000-0000-0000-0000-3cecef1a2b3c"},
		CPU:      &CPU{Model: "AMD EPYC 9454 48-Core Processor", Arch: "x86_64", Sockets: n(2), Cores: n(96), Threads: n(192)},
		Memory:   &Memory{TotalBytes: n64(1649267441664)},
		Drivers:  map[string]string{"nvidia": "550.90.07", "cuda": "12.4", "mlx5_core": "24.04-0.6.6", "nvme": "1.0"},
		Firmware: map[string]string{"bios": "2.1a", "bmc": "01.02.11", "cx7": "28.39.1002"},
		OS:       &OS{Name: "Ubuntu", Version: "22.04.4 LTS", Kernel: "5.15.0-113-generic"},
	}
	for g := 0; g < 8; g++ {
		gpu := GPU{UUID: fmt.Sprintf("GPU-%08x-8a4d-4e6b-9c2f-1d7e3a9b0c%02x", 0x5f3b2c1e+g, g), Index: n(g),
			Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: n(81920), PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*g), MigMode: "enabled"}
		for m := 0; m < 7; m++ {
			gpu.MigDevices = append(gpu.MigDevices, MIGDevice{Profile: "1g.10gb", UUID: fmt.Sprintf("MIG-%08x-31c4-4f8a-b5e1-6c2d8f4a7b%d%d", 0x0a9e7d62+g, g, m)})
		}
		s.GPUs = append(s.GPUs, gpu)
	}
	for d := 0; d < 24; d++ {
		s.Disks = append(s.Disks, Disk{WWN: fmt.Sprintf("eui.36344730525%07d", d), Serial: fmt.Sprintf("S6EWNA0T%06d", d),
			Model: "SAMSUNG MZQL23T8HCLS-00A07", SizeBytes: n64(3840755982336), Slot: fmt.Sprintf("nvme%d", d)})
	}
	for i := 0; i < 8; i++ {
		s.NICs = append(s.NICs, NIC{MAC: fmt.Sprintf("b8:3f:d2:4a:%02x:%02x", i, 0x10+i), Name: fmt.Sprintf("ens%df0np0", 10+i), SpeedMbps: n64(400000)})
	}
	b, _ := json.Marshal(s)
	return b
}

func benchPayloads(b testing.TB) map[string][]byte {
	return map[string][]byte{"h100": fixture(b), "mig": migNode()}
}

// BenchmarkParseSections parses each payload with the hand parser and
// with encoding/json into the same Sections type.
func BenchmarkParseSections(b *testing.B) {
	payloads := benchPayloads(b)
	for _, name := range []string{"h100", "mig"} {
		raw := payloads[name]
		b.Run(name+"/hand", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				p := parser{data: raw}
				if _, err := p.sections(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var s Sections
				if err := json.Unmarshal(raw, &s); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/encoding-json-strict", func(b *testing.B) {
			// Unknown fields refused, as the report's contract wants.
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var s Sections
				d := json.NewDecoder(bytes.NewReader(raw))
				d.DisallowUnknownFields()
				if err := d.Decode(&s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The payloads decode to the same sections either way.
func TestBenchPayloadsAgree(t *testing.T) {
	for name, raw := range benchPayloads(t) {
		p := parser{data: raw}
		hand, err := p.sections()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var lib Sections
		if err := json.Unmarshal(raw, &lib); err != nil {
			t.Fatal(err)
		}
		h, _ := json.Marshal(hand)
		l, _ := json.Marshal(lib)
		if !bytes.Equal(h, l) {
			t.Errorf("%s: the parsers disagree:\n%s\n%s", name, h, l)
		}
	}
}
