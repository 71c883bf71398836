package inventory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

func fixture(t testing.TB) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/h100-node.json")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustDecode(t testing.TB, raw string) (*Sections, []byte, string) {
	t.Helper()
	s, canonical, hash, err := Decode([]byte(raw))
	if err != nil {
		t.Fatalf("Decode(%.200s): %v", raw, err)
	}
	return s, canonical, hash
}

func TestDecodeH100Fixture(t *testing.T) {
	raw := fixture(t)
	s, canonical, hash, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.GPUs) != 8 || len(s.Disks) != 4 || len(s.NICs) != 2 {
		t.Fatalf("counts: %d GPUs, %d disks, %d NICs", len(s.GPUs), len(s.Disks), len(s.NICs))
	}
	g := s.GPUs[0]
	if g.UUID != "GPU-5f3b2c1e-8a4d-4e6b-9c2f-1d7e3a9b0c41" || g.Index == nil || *g.Index != 0 ||
		g.MemoryMiB == nil || *g.MemoryMiB != 81559 || g.MigMode != "disabled" || g.PCIBusID != "00000000:18:00.0" {
		t.Fatalf("gpu[0] = %+v", g)
	}
	if s.Memory == nil || s.Memory.TotalBytes == nil || *s.Memory.TotalBytes != 2199023255552 {
		t.Fatalf("memory = %+v", s.Memory)
	}
	if s.CPU == nil || *s.CPU.Sockets != 2 || *s.CPU.Threads != 224 || s.CPU.Arch != "x86_64" {
		t.Fatalf("cpu = %+v", s.CPU)
	}
	if s.Drivers["nvidia"] != "550.90.07" || s.Drivers["cuda"] != "12.4" || s.Firmware["bios"] != "1.6.6" {
		t.Fatalf("drivers %v firmware %v", s.Drivers, s.Firmware)
	}
	if s.Disks[2].Slot != "nvme2" || *s.Disks[2].SizeBytes != 3840755982336 {
		t.Fatalf("disk[2] = %+v", s.Disks[2])
	}
	if s.OS == nil || s.OS.Kernel != "5.15.0-113-generic" || s.System.Product != "PowerEdge XE9680" {
		t.Fatalf("os %+v system %+v", s.OS, s.System)
	}
	// The NIC keeps the spelling sent; its device id is lowercased.
	if s.NICs[0].MAC != "B8:3F:D2:4A:91:E0" || s.NICs[0].DeviceID() != "b8:3f:d2:4a:91:e0" {
		t.Fatalf("nic[0] = %+v", s.NICs[0])
	}
	if !bytes.Contains(canonical, []byte(`"mac":"B8:3F:D2:4A:91:E0"`)) {
		t.Fatalf("canonical form rewrote the MAC: %s", canonical)
	}
	if len(hash) != 64 || strings.ToLower(hash) != hash || hash != Hash(canonical) {
		t.Fatalf("hash %q", hash)
	}
	// Pinned: stored snapshots are compared by hash, so the canonical form
	// must never change between releases. (Cross-checked with Python's
	// json.dumps(sort_keys=True, separators=(",", ":")), which agrees with
	// RFC 8785 for this ASCII, integer-only document.)
	if hash != "298f66df8f8ce98354226a7a0d85ad9306b33264bb158eb67cd4db05ed09ad9f" {
		t.Fatalf("the fixture's hash changed: %s", hash)
	}
	// Canonical: no insignificant whitespace, keys sorted.
	if bytes.ContainsAny(canonical, "\n\t") || !bytes.HasPrefix(canonical, []byte(`{"cpu":{"arch":"x86_64","cores":112,`)) {
		t.Fatalf("canonical = %.120s", canonical)
	}
	parsed, err := Parse(canonical)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(parsed, s) {
		t.Fatalf("Parse(canonical) differs from Decode:\n%+v\n%+v", parsed, s)
	}
	again, canonical2, hash2, err := Decode(canonical)
	if err != nil || hash2 != hash || !bytes.Equal(canonical2, canonical) || !reflect.DeepEqual(again, s) {
		t.Fatalf("re-Decode of canonical: %v, %s vs %s", err, hash2, hash)
	}
}

func TestDecodeEmptyReport(t *testing.T) {
	s, canonical, hash := mustDecode(t, " { } ")
	if !reflect.DeepEqual(s, &Sections{}) || string(canonical) != "{}" {
		t.Fatalf("%+v %s", s, canonical)
	}
	// sha256("{}")
	if hash != "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
		t.Fatalf("hash %s", hash)
	}
}

// TestCanonicalForm pins the RFC 8785 output for a small report.
func TestCanonicalForm(t *testing.T) {
	_, canonical, _ := mustDecode(t, `{
		"os": {"version": "24.04", "name": "Ubuntu \u00e9\/"},
		"memory": {"totalBytes": 1.0e3},
		"drivers": {"nvidia": "570.86.15", "cuda": "12.8"}
	}`)
	want := `{"drivers":{"cuda":"12.8","nvidia":"570.86.15"},"memory":{"totalBytes":1000},"os":{"name":"Ubuntu é/","version":"24.04"}}`
	if string(canonical) != want {
		t.Fatalf("canonical\n got %s\nwant %s", canonical, want)
	}
}

// reorder re-emits a JSON document with every object's keys in reverse
// order and a different layout, keeping every value's text.
func reorder(t *testing.T, raw []byte) []byte {
	t.Helper()
	var walk func(v json.RawMessage, indent string) string
	walk = func(v json.RawMessage, indent string) string {
		v = bytes.TrimSpace(v)
		switch v[0] {
		case '{':
			dec := json.NewDecoder(bytes.NewReader(v))
			dec.UseNumber()
			if _, err := dec.Token(); err != nil {
				t.Fatal(err)
			}
			var keys []string
			var vals []json.RawMessage
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					t.Fatal(err)
				}
				var m json.RawMessage
				if err := dec.Decode(&m); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k.(string))
				vals = append(vals, m)
			}
			var parts []string
			for i := len(keys) - 1; i >= 0; i-- {
				kb, _ := json.Marshal(keys[i])
				parts = append(parts, indent+"\t"+string(kb)+" :  "+walk(vals[i], indent+"\t"))
			}
			return "{\r\n" + strings.Join(parts, " ,\n") + "\n" + indent + "}"
		case '[':
			var items []json.RawMessage
			if err := json.Unmarshal(v, &items); err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, it := range items {
				parts = append(parts, walk(it, indent))
			}
			return "[ " + strings.Join(parts, ",  ") + " ]"
		}
		return string(v)
	}
	return []byte(walk(raw, ""))
}

func TestHashIndependentOfKeyOrderAndWhitespace(t *testing.T) {
	raw := fixture(t)
	_, c1, h1, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string][]byte{"reordered": reorder(t, raw)}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		t.Fatal(err)
	}
	variants["compact"] = compact.Bytes()
	// Through Go maps: keys come out sorted, another order again.
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	indented, _ := json.MarshalIndent(generic, "", "    ")
	variants["sorted+indented"] = indented
	for name, v := range variants {
		if bytes.Equal(v, raw) {
			t.Fatalf("%s: variant equals the original", name)
		}
		_, c2, h2, err := Decode(v)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, v)
		}
		if h2 != h1 || !bytes.Equal(c1, c2) {
			t.Errorf("%s: hash %s, want %s", name, h2, h1)
		}
	}

	// Equivalent spellings of strings and numbers canonicalize alike.
	_, _, a := mustDecode(t, `{"os":{"name":"Ubuntu","kernel":"6.8.0"},"gpus":[{"uuid":"GPU-1","index":3,"memoryMiB":81559}]}`)
	_, _, b := mustDecode(t, "{\"gpus\":[{\"memoryMiB\":8.1559e4,\"index\":3.0,\"uuid\":\"\\u0047PU-1\"}],\n\"os\":{\"kernel\":\"6.8.0\",\"name\":\"Ubunt\\u0075\"}}")
	if a != b {
		t.Fatalf("hash %s != %s", a, b)
	}
	// A different report hashes differently.
	_, _, c := mustDecode(t, `{"os":{"name":"Ubuntu","kernel":"6.8.1"},"gpus":[{"uuid":"GPU-1","index":3,"memoryMiB":81559}]}`)
	if c == a {
		t.Fatal("different reports share a hash")
	}
}

func TestDecodeAccepts(t *testing.T) {
	for name, raw := range map[string]string{
		"empty gpus":            `{"gpus":[]}`,
		"empty maps":            `{"drivers":{},"firmware":{}}`,
		"integral spellings":    `{"cpu":{"sockets":2.0,"cores":1.12e2,"threads":0.224e3},"gpus":[{"uuid":"GPU-a","index":-0}]}`,
		"max sizes":             `{"memory":{"totalBytes":9007199254740992},"disks":[{"wwn":"w","sizeBytes":9007199254740992}]}`,
		"max memoryMiB":         `{"gpus":[{"uuid":"GPU-a","memoryMiB":16777216,"index":255}]}`,
		"max speed":             `{"nics":[{"mac":"aa:bb:cc:dd:ee:ff","speedMbps":10000000}]}`,
		"256 characters":        `{"os":{"name":"` + strings.Repeat("é", 256) + `"}}`,
		"256 escaped chars":     `{"os":{"name":"` + strings.Repeat(`\u00e9`, 256) + `"}}`,
		"surrogate pair":        `{"os":{"name":"\ud83d\ude80 rocket"}}`,
		"replacement char":      `{"os":{"name":"\ufffd` + "\uFFFD" + `"}}`,
		"unslotted disks":       `{"disks":[{"wwn":"a","slot":""},{"wwn":"b","slot":""},{"wwn":"c"}]}`,
		"mig enabled":           `{"gpus":[{"uuid":"GPU-a","migMode":"enabled","migDevices":[{"profile":"3g.40gb","uuid":"MIG-1"},{"profile":"3g.40gb","uuid":"MIG-2"}]}]}`,
		"64 driver key":         `{"drivers":{"` + strings.Repeat("a", 64) + `":"1"}}`,
		"64 drivers":            `{"drivers":{` + entries(64) + `}}`,
		"64 gpus":               `{"gpus":[` + gpus(64) + `]}`,
		"control chars allowed": `{"os":{"name":"a\tb\nc\u0001"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, canonical, hash := mustDecode(t, raw)
			if p, err := Parse(canonical); err != nil || !reflect.DeepEqual(p, s) {
				t.Fatalf("Parse: %v\n%+v\n%+v", err, p, s)
			}
			if _, _, h, err := Decode(canonical); err != nil || h != hash {
				t.Fatalf("re-Decode: %v", err)
			}
		})
	}
}

func entries(n int) string {
	var parts []string
	for i := 0; i < n; i++ {
		parts = append(parts, fmt.Sprintf(`"d%d":"1.%d"`, i, i))
	}
	return strings.Join(parts, ",")
}

func items(n int, format string) string {
	var parts []string
	for i := 0; i < n; i++ {
		parts = append(parts, fmt.Sprintf(format, i))
	}
	return strings.Join(parts, ",")
}

func gpus(n int) string { return items(n, `{"uuid":"GPU-%d"}`) }

func macs(n int) string {
	var parts []string
	for i := 0; i < n; i++ {
		parts = append(parts, fmt.Sprintf(`{"mac":"02:00:00:00:%02x:%02x"}`, i/256, i%256))
	}
	return strings.Join(parts, ",")
}

func TestDecodeRejects(t *testing.T) {
	long := strings.Repeat("x", 257)
	for _, tc := range []struct {
		name, raw, path string
	}{
		// The value itself.
		{"empty input", ``, "sections"},
		{"whitespace only", " \n", "sections"},
		{"array", `[]`, "sections"},
		{"string", `"gpus"`, "sections"},
		{"null", `null`, "sections"},
		{"number", `42`, "sections"},
		{"garbage", `{{`, "sections"},
		{"two values", `{} {}`, "sections"},
		{"trailing garbage", `{}x`, "sections"},
		{"trailing NUL", "{}\x00", "sections"},
		{"unterminated", `{"os":{"name":"a"}`, "sections"},
		{"trailing comma", `{"os":{"name":"a",}}`, "sections.os"},
		{"missing colon", `{"os" {}}`, "sections"},
		{"bad literal", `{"os":{"name":nul}}`, "sections.os.name"},
		{"BOM", "\ufeff{}", "sections"},

		// Unknown keys.
		{"unknown section", `{"os":{},"bogus":{}}`, "sections.bogus"},
		{"section wrong case", `{"GPUs":[]}`, "sections.GPUs"},
		{"unknown system field", `{"system":{"vendor":"x","color":"red"}}`, "sections.system.color"},
		{"unknown gpu field", `{"gpus":[{"uuid":"GPU-1","temp":40}]}`, "sections.gpus[0].temp"},
		{"unknown mig field", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb","uuid":"MIG-1","x":1}]}]}`, "sections.gpus[0].migDevices[0].x"},
		{"unknown disk field", `{"disks":[{"wwn":"a","health":"ok"}]}`, "sections.disks[0].health"},
		{"unknown nic field", `{"nics":[{"mac":"aa:bb:cc:dd:ee:ff","mtu":9000}]}`, "sections.nics[0].mtu"},
		{"unknown before bad later", `{"zzz":1,"gpus":"x"}`, "sections.zzz"},
		{"empty key", `{"":1}`, "sections."},

		// Wrong types.
		{"system string", `{"system":"dell"}`, "sections.system"},
		{"system null", `{"system":null}`, "sections.system"},
		{"cpu array", `{"cpu":[]}`, "sections.cpu"},
		{"gpus object", `{"gpus":{}}`, "sections.gpus"},
		{"gpus null", `{"gpus":null}`, "sections.gpus"},
		{"gpu string", `{"gpus":["GPU-1"]}`, "sections.gpus[0]"},
		{"gpu uuid number", `{"gpus":[{"uuid":1}]}`, "sections.gpus[0].uuid"},
		{"gpu index string", `{"gpus":[{"uuid":"GPU-1","index":"0"}]}`, "sections.gpus[0].index"},
		{"gpu index bool", `{"gpus":[{"uuid":"GPU-1","index":true}]}`, "sections.gpus[0].index"},
		{"migDevices object", `{"gpus":[{"uuid":"GPU-1","migDevices":{}}]}`, "sections.gpus[0].migDevices"},
		{"memory totalBytes string", `{"memory":{"totalBytes":"1"}}`, "sections.memory.totalBytes"},
		{"os name number", `{"os":{"name":24}}`, "sections.os.name"},
		{"driver version number", `{"drivers":{"nvidia":550}}`, "sections.drivers.nvidia"},
		{"firmware array", `{"firmware":["1.0"]}`, "sections.firmware"},
		{"nic speed null", `{"nics":[{"mac":"aa:bb:cc:dd:ee:ff","speedMbps":null}]}`, "sections.nics[0].speedMbps"},
		{"disk slot number", `{"disks":[{"wwn":"a","slot":0}]}`, "sections.disks[0].slot"},

		// Duplicate keys.
		{"duplicate section", `{"os":{},"gpus":[],"os":{}}`, "sections.os"},
		{"duplicate gpu field", `{"gpus":[{"uuid":"GPU-1","uuid":"GPU-2"}]}`, "sections.gpus[0].uuid"},
		{"duplicate escaped key", `{"os":{"name":"a","n\u0061me":"b"}}`, "sections.os.name"},
		{"duplicate driver", `{"drivers":{"nvidia":"1","cuda":"2","nvidia":"3"}}`, "sections.drivers.nvidia"},
		{"duplicate mig field", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"a","profile":"b"}]}]}`, "sections.gpus[0].migDevices[0].profile"},

		// Nesting: no value of the schema nests deeper than 5, and the
		// parser never descends into a value of the wrong type.
		{"deep arrays", `{"gpus":[[[[[[[[[[[[]]]]]]]]]]]]}`, "sections.gpus[0]"},
		{"deep objects", `{"system":{"vendor":{"a":{"b":{"c":{"d":{"e":{"f":{"g":{}}}}}}}}}}`, "sections.system.vendor"},
		{"deep mig", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":[[[[[[[[[[1]]]]]]]]]]}]}]}`, "sections.gpus[0].migDevices[0].profile"},
		{"very deep", `{"gpus":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, "sections.gpus[0]"},

		// Numbers.
		{"float index", `{"gpus":[{"uuid":"GPU-1","index":1.5}]}`, "sections.gpus[0].index"},
		{"tiny fraction", `{"gpus":[{"uuid":"GPU-1","index":1.0000000000000000001}]}`, "sections.gpus[0].index"},
		{"negative exponent", `{"cpu":{"cores":1e-1}}`, "sections.cpu.cores"},
		{"huge negative exponent", `{"cpu":{"cores":1e-400}}`, "sections.cpu.cores"},
		{"negative index", `{"gpus":[{"uuid":"GPU-1","index":-1}]}`, "sections.gpus[0].index"},
		{"index 256", `{"gpus":[{"uuid":"GPU-1","index":256}]}`, "sections.gpus[0].index"},
		{"memoryMiB too big", `{"gpus":[{"uuid":"GPU-1","memoryMiB":16777217}]}`, "sections.gpus[0].memoryMiB"},
		{"totalBytes 2^53+1", `{"memory":{"totalBytes":9007199254740993}}`, "sections.memory.totalBytes"},
		{"sizeBytes 1e16", `{"disks":[{"wwn":"a","sizeBytes":1e16}]}`, "sections.disks[0].sizeBytes"},
		{"sizeBytes 1e400", `{"disks":[{"wwn":"a","sizeBytes":1e400}]}`, "sections.disks[0].sizeBytes"},
		{"sizeBytes beyond float64", `{"disks":[{"wwn":"a","sizeBytes":` + strings.Repeat("9", 400) + `}]}`, "sections.disks[0].sizeBytes"},
		{"huge exponent", `{"memory":{"totalBytes":1e99999999999999999999}}`, "sections.memory.totalBytes"},
		{"speed too big", `{"nics":[{"mac":"aa:bb:cc:dd:ee:ff","speedMbps":10000001}]}`, "sections.nics[0].speedMbps"},
		{"cores too big", `{"cpu":{"cores":65536}}`, "sections.cpu.cores"},
		{"leading zero", `{"cpu":{"cores":01}}`, "sections.cpu"},
		{"bare minus", `{"cpu":{"cores":-}}`, "sections.cpu.cores"},
		{"dot without digits", `{"cpu":{"cores":1.}}`, "sections.cpu.cores"},
		{"leading dot", `{"cpu":{"cores":.5}}`, "sections.cpu.cores"},
		{"NaN", `{"cpu":{"cores":NaN}}`, "sections.cpu.cores"},
		{"Infinity", `{"cpu":{"cores":Infinity}}`, "sections.cpu.cores"},
		{"plus sign", `{"cpu":{"cores":+1}}`, "sections.cpu.cores"},
		{"hex", `{"cpu":{"cores":0x10}}`, "sections.cpu"},

		// Strings.
		{"257 characters", `{"os":{"name":"` + long + `"}}`, "sections.os.name"},
		{"257 multibyte characters", `{"os":{"name":"` + strings.Repeat("é", 257) + `"}}`, "sections.os.name"},
		{"257 escaped characters", `{"os":{"name":"` + strings.Repeat(`\u00e9`, 257) + `"}}`, "sections.os.name"},
		{"invalid UTF-8", "{\"os\":{\"name\":\"a\xffb\"}}", "sections.os.name"},
		{"encoded surrogate", "{\"os\":{\"name\":\"\xed\xa0\x80\"}}", "sections.os.name"},
		{"overlong UTF-8", "{\"os\":{\"name\":\"\xc0\xaf\"}}", "sections.os.name"},
		{"escaped NUL", `{"os":{"name":"a\u0000b"}}`, "sections.os.name"},
		{"raw NUL", "{\"os\":{\"name\":\"a\x00b\"}}", "sections.os.name"},
		{"raw newline", "{\"os\":{\"name\":\"a\nb\"}}", "sections.os.name"},
		{"lone high surrogate", `{"os":{"name":"\ud800"}}`, "sections.os.name"},
		{"lone low surrogate", `{"os":{"name":"\udc00"}}`, "sections.os.name"},
		{"bad surrogate pair", `{"os":{"name":"\ud800\u0041"}}`, "sections.os.name"},
		{"bad escape", `{"os":{"name":"\x"}}`, "sections.os.name"},
		{"short unicode escape", `{"os":{"name":"\u12"}}`, "sections.os.name"},
		{"invalid UTF-8 in key", "{\"os\":{\"na\xffme\":\"x\"}}", "sections.os"},
		{"NUL in key", `{"os":{"\u0000":"x"}}`, "sections.os"},
		{"257 character key", `{"os":{"` + long + `":"x"}}`, "sections.os"},
		{"driver value 257", `{"drivers":{"nvidia":"` + long + `"}}`, "sections.drivers.nvidia"},
		{"firmware value 257", `{"firmware":{"bios":"` + long + `"}}`, "sections.firmware.bios"},

		// drivers, firmware.
		{"driver key with space", `{"drivers":{"nv idia":"1"}}`, "sections.drivers.nv idia"},
		{"driver key with slash", `{"drivers":{"nvidia/cuda":"1"}}`, "sections.drivers.nvidia/cuda"},
		{"empty driver key", `{"drivers":{"":"1"}}`, "sections.drivers."},
		{"65 character driver key", `{"drivers":{"` + strings.Repeat("a", 65) + `":"1"}}`, "sections.drivers." + strings.Repeat("a", 65)},
		{"non-ASCII firmware key", `{"firmware":{"bïos":"1"}}`, "sections.firmware.bïos"},
		{"65 drivers", `{"drivers":{` + entries(65) + `}}`, "sections.drivers"},
		{"65 firmware", `{"firmware":{` + entries(65) + `}}`, "sections.firmware"},

		// gpus.
		{"65 gpus", `{"gpus":[` + gpus(65) + `]}`, "sections.gpus"},
		{"gpu without uuid", `{"gpus":[{"index":0,"model":"H100"}]}`, "sections.gpus[0].uuid"},
		{"gpu empty uuid", `{"gpus":[{"uuid":""}]}`, "sections.gpus[0].uuid"},
		{"gpu uuid underscore", `{"gpus":[{"uuid":"GPU_1"}]}`, "sections.gpus[0].uuid"},
		{"gpu uuid 129", `{"gpus":[{"uuid":"GPU-` + strings.Repeat("a", 125) + `"}]}`, "sections.gpus[0].uuid"},
		{"duplicate gpu uuid", `{"gpus":[{"uuid":"GPU-1"},{"uuid":"GPU-2"},{"index":2,"uuid":"GPU-1"}]}`, "sections.gpus[2].uuid"},
		// GPU and MIG UUIDs are one namespace of device ids, in either order.
		{"mig uuid of its gpu", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb","uuid":"gpu-1"}]}]}`, "sections.gpus[0].migDevices[0].uuid"},
		{"mig uuid of an earlier gpu", `{"gpus":[{"uuid":"X-1"},{"uuid":"GPU-2","migDevices":[{"profile":"1g.10gb","uuid":"X-1"}]}]}`, "sections.gpus[1].migDevices[0].uuid"},
		{"gpu uuid of an earlier mig", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb","uuid":"MIG-1"}]},{"uuid":"mig-1"}]}`, "sections.gpus[1].uuid"},
		{"gpu uuid after its own mig", `{"gpus":[{"migDevices":[{"profile":"1g.10gb","uuid":"MIG-1"}],"uuid":"MIG-1"}]}`, "sections.gpus[0].uuid"},
		{"migMode on", `{"gpus":[{"uuid":"GPU-1","migMode":"on"}]}`, "sections.gpus[0].migMode"},
		{"migMode empty", `{"gpus":[{"uuid":"GPU-1","migMode":""}]}`, "sections.gpus[0].migMode"},
		{"migMode case", `{"gpus":[{"uuid":"GPU-1","migMode":"Enabled"}]}`, "sections.gpus[0].migMode"},
		{"65 mig devices", `{"gpus":[{"uuid":"GPU-1","migDevices":[` + items(65, `{"profile":"1g.10gb","uuid":"MIG-%d"}`) + `]}]}`, "sections.gpus[0].migDevices"},
		{"mig without uuid", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb"}]}]}`, "sections.gpus[0].migDevices[0].uuid"},
		{"mig without profile", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"uuid":"MIG-1"}]}]}`, "sections.gpus[0].migDevices[0].profile"},
		{"mig empty profile", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"","uuid":"MIG-1"}]}]}`, "sections.gpus[0].migDevices[0].profile"},
		{"mig bad uuid", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb","uuid":"MIG 1"}]}]}`, "sections.gpus[0].migDevices[0].uuid"},
		{"duplicate mig uuid", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb","uuid":"MIG-1"},{"profile":"1g.10gb","uuid":"MIG-1"}]}]}`, "sections.gpus[0].migDevices[1].uuid"},
		{"duplicate gpu uuid in another case", `{"gpus":[{"uuid":"GPU-5f3b2c1e-8a4d"},{"uuid":"gpu-5F3B2C1E-8A4D"}]}`, "sections.gpus[1].uuid"},
		{"duplicate mig uuid in another case", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb","uuid":"MIG-ab"}]},{"uuid":"GPU-2","migDevices":[{"profile":"2g.20gb","uuid":"mig-AB"}]}]}`, "sections.gpus[1].migDevices[0].uuid"},
		{"duplicate mig uuid across gpus", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":"1g.10gb","uuid":"MIG-1"}]},{"uuid":"GPU-2","migDevices":[{"profile":"2g.20gb","uuid":"MIG-1"}]}]}`, "sections.gpus[1].migDevices[0].uuid"},

		// disks.
		{"257 disks", `{"disks":[` + items(257, `{"wwn":"w%d"}`) + `]}`, "sections.disks"},
		{"disk without wwn", `{"disks":[{"slot":"nvme0"}]}`, "sections.disks[0].wwn"},
		{"disk bad wwn", `{"disks":[{"wwn":"a/b"}]}`, "sections.disks[0].wwn"},
		{"disk empty wwn", `{"disks":[{"wwn":""}]}`, "sections.disks[0].wwn"},
		{"duplicate wwn", `{"disks":[{"wwn":"naa.5000c500a1b2c3d4"},{"wwn":"naa.5000c500a1b2c3d4"}]}`, "sections.disks[1].wwn"},
		{"duplicate wwn in another case", `{"disks":[{"wwn":"naa.5000c500a1b2c3d4"},{"wwn":"NAA.5000C500A1B2C3D4"}]}`, "sections.disks[1].wwn"},
		{"duplicate slot", `{"disks":[{"wwn":"a","slot":"nvme0"},{"slot":"nvme0","wwn":"b"}]}`, "sections.disks[1].slot"},

		// nics.
		{"257 nics", `{"nics":[` + macs(257) + `]}`, "sections.nics"},
		{"nic without mac", `{"nics":[{"name":"eth0"}]}`, "sections.nics[0].mac"},
		{"nic short mac", `{"nics":[{"mac":"aa:bb:cc:dd:ee"}]}`, "sections.nics[0].mac"},
		{"nic dashed mac", `{"nics":[{"mac":"aa-bb-cc-dd-ee-ff"}]}`, "sections.nics[0].mac"},
		{"nic non-hex mac", `{"nics":[{"mac":"gg:bb:cc:dd:ee:ff"}]}`, "sections.nics[0].mac"},
		{"nic mac trailing", `{"nics":[{"mac":"aa:bb:cc:dd:ee:ff:"}]}`, "sections.nics[0].mac"},
		{"duplicate mac, other case", `{"nics":[{"mac":"aa:bb:cc:dd:ee:ff"},{"mac":"AA:BB:CC:DD:EE:FF"}]}`, "sections.nics[1].mac"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := Decode([]byte(tc.raw))
			if err == nil {
				t.Fatal("accepted")
			}
			e, ok := errs.As(err)
			if !ok || errs.CodeOf(err) != errs.InvalidInput {
				t.Fatalf("error %v is not INVALID_INPUT", err)
			}
			if got := e.Details["path"]; got != tc.path {
				t.Fatalf("path %q, want %q (%s)", got, tc.path, e.Message)
			}
			if len(e.Message) > 1024 {
				t.Fatalf("message is %d bytes", len(e.Message))
			}
		})
	}
}

func TestParse(t *testing.T) {
	s, err := Parse([]byte(`{"gpus":[{"uuid":"GPU-1","index":0,"future":true}],"future":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.GPUs) != 1 || s.GPUs[0].Index == nil || *s.GPUs[0].Index != 0 {
		t.Fatalf("%+v", s)
	}
	if _, err := Parse([]byte(`{"gpus":`)); err == nil || errs.CodeOf(err) != errs.Internal {
		t.Fatalf("broken stored sections: %v", err)
	}
}

func BenchmarkDecode(b *testing.B) {
	raw := fixture(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, _, _, err := Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}
