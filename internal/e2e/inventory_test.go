package e2e

// End-to-end tests of the inventory group (report, get, history, diff),
// all through HTTP, against the seed page 001 and the contract (sections 4,
// 6 and 8).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/testkit"
)

var (
	invIDRe   = regexp.MustCompile(`^inv_[0-9a-hjkmnp-tv-z]{26,52}$`)
	invHashRe = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// invReportLimit is the seed's body limit of inventory.report (256 KiB).
const invReportLimit = 256 << 10

// invNorm round-trips v through JSON so it compares with decoded bodies.
func invNorm(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// invHash is the contract's hash: SHA-256 (hex) of the RFC 8785 canonical JSON.
func invHash(t testing.TB, sections any) string {
	t.Helper()
	b, err := json.Marshal(sections)
	if err != nil {
		t.Fatal(err)
	}
	c, err := jcs.Transform(b)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:])
}

// invScramble writes v as JSON with keys in reverse order, odd whitespace,
// integral numbers spelled as decimals and 'e' escaped in strings: the same
// canonical JSON as v.
func invScramble(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Sort(sort.Reverse(sort.StringSlice(keys)))
		var b strings.Builder
		b.WriteString("{\n\t")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" ,\r\n\t ")
			}
			b.WriteString(invScramble(k))
			b.WriteString("  :\t")
			b.WriteString(invScramble(x[k]))
		}
		b.WriteString("\n}")
		return b.String()
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = invScramble(e)
		}
		return "[ " + strings.Join(parts, " ,\n ") + " ]"
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10) + ".0"
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		b, _ := json.Marshal(x)
		return strings.ReplaceAll(string(b), "e", `\u0065`)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// invReport calls inventory.report with sections (a value or a raw JSON string).
func invReport(t testing.TB, e *testkit.Env, cred, nodeID string, sections any, collectedAt ...string) testkit.Resp {
	t.Helper()
	raw, ok := sections.(string)
	if !ok {
		b, err := json.Marshal(sections)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	body := `{"nodeId":` + strconv.Quote(nodeID) + `,"sections":` + raw
	if len(collectedAt) > 0 {
		body += `,"collectedAt":` + strconv.Quote(collectedAt[0])
	}
	return env(t, e).Call(cred, "inventory/report", body+"}")
}

// invSnap checks a Snapshot's shape and returns it.
func invSnap(t testing.TB, v any, nodeID string) map[string]any {
	t.Helper()
	s, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("not a snapshot: %v", v)
	}
	if !invIDRe.MatchString(str(s["id"])) || str(s["nodeId"]) != nodeID || !invHashRe.MatchString(str(s["hash"])) {
		t.Fatalf("snapshot id/nodeId/hash: %v", s)
	}
	if _, ok := s["sections"].(map[string]any); !ok {
		t.Fatalf("snapshot sections is not an object: %v", s)
	}
	at := str(s["collectedAt"])
	ts, err := time.Parse(time.RFC3339Nano, at)
	if err != nil || !strings.HasSuffix(at, "Z") || ts.Location() != time.UTC {
		t.Fatalf("collectedAt %q is not RFC 3339 UTC: %v", at, err)
	}
	return s
}

// invStore reports sections and requires a new snapshot.
func invStore(t testing.TB, e *testkit.Env, cred, nodeID string, sections any, collectedAt ...string) map[string]any {
	t.Helper()
	r := invReport(t, e, cred, nodeID, sections, collectedAt...)
	expect(t, r, "", "")
	if r.Body["stored"] != true {
		t.Fatalf("report not stored: %s", r.Raw)
	}
	return invSnap(t, r.Body["snapshot"], nodeID)
}

func invNode(tenantID, nodeID string) map[string]any {
	return map[string]any{"tenantId": tenantID, "nodeId": nodeID}
}

func invDiffBody(tenantID, nodeID, from, to string) map[string]any {
	b := invNode(tenantID, nodeID)
	if from != "" {
		b["from"] = from
	}
	if to != "" {
		b["to"] = to
	}
	return b
}

type invChange struct {
	Type, DeviceID string
	Before, After  any
}

// invDiff calls inventory.diff and checks the result's from and to.
func invDiff(t testing.TB, e *testkit.Env, tok, tenantID, nodeID, from, to, wantFrom, wantTo string) []invChange {
	t.Helper()
	r := env(t, e).Call(tok, "inventory/diff", invDiffBody(tenantID, nodeID, from, to))
	expect(t, r, "", "")
	if f, ok := r.Body["from"].(string); !ok || f != wantFrom || r.Str("to") != wantTo {
		t.Fatalf("diff from=%q to=%q: want from %q to %q, got %s", from, to, wantFrom, wantTo, r.Raw)
	}
	raw, ok := r.Body["changes"].([]any)
	if !ok {
		t.Fatalf("changes is not an array: %s", r.Raw)
	}
	out := make([]invChange, len(raw))
	for i, x := range raw {
		c := x.(map[string]any)
		for _, k := range []string{"type", "deviceId", "before", "after"} {
			if _, ok := c[k]; !ok {
				t.Fatalf("change without %q: %s", k, r.Raw)
			}
		}
		out[i] = invChange{Type: str(c["type"]), DeviceID: str(c["deviceId"]), Before: c["before"], After: c["after"]}
	}
	return out
}

func invTypes(cs []invChange) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Type + " " + c.DeviceID
	}
	return out
}

// invWantChanges compares changes exactly (types, device ids, before, after).
func invWantChanges(t testing.TB, got []invChange, want ...invChange) {
	t.Helper()
	for i := range want {
		want[i].Before, want[i].After = invNorm(t, want[i].Before), invNorm(t, want[i].After)
	}
	if len(got) != len(want) {
		t.Fatalf("changes: want %v, got %v", invTypes(want), invTypes(got))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("change %d:\nwant %#v\ngot  %#v", i, want[i], got[i])
		}
	}
}

func invGPUs(s map[string]any) []any  { return s["gpus"].([]any) }
func invDisks(s map[string]any) []any { return s["disks"].([]any) }

func invSnapshotCount(t testing.TB, e *testkit.Env, nodeID string) int {
	t.Helper()
	var n int
	if err := e.DB.GetContext(context.Background(), &n, `SELECT count(*) FROM inventory_snapshots WHERE node_id = $1`, nodeID); err != nil {
		t.Fatal(err)
	}
	return n
}

// ---------------------------------------------------------------------------

func TestInventoryReportStoresAndDeduplicates(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)

	// Nothing before the first report.
	expect(t, e.Call(viewer, "inventory/get", invNode("acme", nodeID)), "NOT_FOUND", anyPath)

	base := h100(t)
	before := time.Now().UTC().Add(-time.Minute)
	r := invReport(t, e, cred, nodeID, base)
	expect(t, r, "", "")
	if r.Body["stored"] != true {
		t.Fatalf("first report not stored: %s", r.Raw)
	}
	first := invSnap(t, r.Body["snapshot"], nodeID)
	if at, _ := time.Parse(time.RFC3339Nano, str(first["collectedAt"])); at.Before(before) || at.After(time.Now().Add(time.Minute)) {
		t.Fatalf("collectedAt defaults to now: %v", first["collectedAt"])
	}
	// The hash is SHA-256 of the RFC 8785 canonical JSON of sections, and
	// the returned sections are that canonical JSON.
	if h := invHash(t, base); first["hash"] != h {
		t.Fatalf("hash %v, want %s", first["hash"], h)
	}
	var wire struct {
		Snapshot struct {
			Sections json.RawMessage `json:"sections"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(r.Raw, &wire); err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(wire.Snapshot.Sections); hex.EncodeToString(sum[:]) != first["hash"] {
		t.Fatalf("returned sections are not the hashed canonical JSON: %s", wire.Snapshot.Sections)
	}
	if !reflect.DeepEqual(first["sections"], invNorm(t, base)) {
		t.Fatalf("sections not kept: %v", first["sections"])
	}

	// The same report, spelled differently (keys reordered, whitespace,
	// 81559.0 for 81559, escapes), stores nothing and returns the latest.
	scrambled := invScramble(base)
	if strings.Contains(scrambled, `"system":`) || !strings.Contains(scrambled, `81559.0`) {
		t.Fatalf("test bug: scramble did nothing: %.200s", scrambled)
	}
	for i, raw := range []string{scrambled, "\n  " + scrambled + "\t\n"} {
		body := "{\n  \"sections\" :" + raw + " ,\n\"nodeId\":\t\"" + nodeID + "\"\n}\n"
		again := e.Call(cred, "inventory/report", body)
		expect(t, again, "", "")
		if again.Body["stored"] != false {
			t.Fatalf("%d: equal report stored: %s", i, again.Raw)
		}
		s := invSnap(t, again.Body["snapshot"], nodeID)
		if s["id"] != first["id"] || s["hash"] != first["hash"] || s["collectedAt"] != first["collectedAt"] {
			t.Fatalf("%d: equal report returned %v, want the latest %v", i, s, first)
		}
	}
	// An equal report with another collectedAt still stores nothing.
	if again := invReport(t, e, cred, nodeID, base, "2024-05-01T12:00:00Z"); again.Body["stored"] != false ||
		obj(t, again.Body, "snapshot")["id"] != first["id"] {
		t.Fatalf("equal report with collectedAt: %s", again.Raw)
	}
	if n := invSnapshotCount(t, e, nodeID); n != 1 {
		t.Fatalf("%d snapshots after equal reports, want 1", n)
	}

	// A changed report stores a new snapshot, whose id sorts after.
	changed := h100(t)
	changed["drivers"].(map[string]any)["nvidia"] = "550.127.05"
	second := invStore(t, e, cred, nodeID, changed)
	if second["id"] == first["id"] || str(second["id"]) <= str(first["id"]) || second["hash"] == first["hash"] || second["hash"] != invHash(t, changed) {
		t.Fatalf("changed report: %v after %v", second, first)
	}
	// Going back to the first content is a change against the latest.
	third := invStore(t, e, cred, nodeID, base)
	if third["hash"] != first["hash"] || third["id"] == first["id"] {
		t.Fatalf("report back to the first content: %v", third)
	}

	// collectedAt given is kept (in UTC).
	changed["firmware"].(map[string]any)["bios"] = "1.7.0"
	if s := invStore(t, e, cred, nodeID, changed, "2024-05-01T12:00:00Z"); s["collectedAt"] != "2024-05-01T12:00:00Z" {
		t.Fatalf("collectedAt not kept: %v", s["collectedAt"])
	}
	changed["firmware"].(map[string]any)["bios"] = "1.7.1"
	if s := invStore(t, e, cred, nodeID, changed, "2024-05-01T14:30:00.25+02:00"); s["collectedAt"] != "2024-05-01T12:30:00.25Z" {
		t.Fatalf("collectedAt with an offset: %v", s["collectedAt"])
	}
	changed["firmware"].(map[string]any)["bios"] = "1.7.2"
	soon := time.Now().UTC().Add(30 * time.Minute).Truncate(time.Second)
	if s := invStore(t, e, cred, nodeID, changed, soon.Format(time.RFC3339)); s["collectedAt"] != soon.Format(time.RFC3339) {
		t.Fatalf("collectedAt within the allowed skew: %v", s["collectedAt"])
	}
	count := invSnapshotCount(t, e, nodeID)
	changed["firmware"].(map[string]any)["bios"] = "1.7.3"
	for _, bad := range []string{"", "yesterday", "2024-05-01", "2024-05-01 12:00:00Z", "2024-13-01T00:00:00Z", "2024-05-01T12:00:00",
		time.Now().UTC().Add(48 * time.Hour).Format(time.RFC3339), "9999-12-31T23:59:59Z"} {
		expect(t, invReport(t, e, cred, nodeID, changed, bad), "INVALID_INPUT", "collectedAt")
	}
	r = e.Call(cred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": changed, "collectedAt": 1714564800})
	expect(t, r, "INVALID_INPUT", "collectedAt")
	if n := invSnapshotCount(t, e, nodeID); n != count {
		t.Fatalf("refused reports stored snapshots: %d -> %d", count, n)
	}

	// get returns the latest, to every role of the owning tenant.
	latest := e.Must(e.Call(cred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": h100(t)}))
	latestSnap := invSnap(t, latest.Body["snapshot"], nodeID)
	for _, tok := range []string{admin, member, viewer, e.Operator} {
		g := e.Call(tok, "inventory/get", invNode("acme", nodeID))
		expect(t, g, "", "")
		s := invSnap(t, g.Body, nodeID)
		for _, k := range []string{"id", "hash", "collectedAt"} {
			if s[k] != latestSnap[k] {
				t.Fatalf("get %s: %v, want %v", k, s[k], latestSnap[k])
			}
		}
		if !reflect.DeepEqual(s["sections"], invNorm(t, h100(t))) {
			t.Fatalf("get sections: %v", s["sections"])
		}
	}

	// Concurrent reports of one node are ordered: equal ones store one
	// snapshot, and every stored one is in the history once.
	conc := h100(t)
	conc["os"].(map[string]any)["version"] = "24.04.1 LTS"
	count = invSnapshotCount(t, e, nodeID)
	var wg sync.WaitGroup
	results := make([]testkit.Resp, 8)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = invReport(t, e, cred, nodeID, conc)
		}(i)
	}
	wg.Wait()
	storedIDs := map[any]int{}
	for _, r := range results {
		if r.Status != 200 {
			t.Fatalf("concurrent report: %d %s", r.Status, r.Raw)
		}
		if r.Body["stored"] == true {
			storedIDs[obj(t, r.Body, "snapshot")["id"]]++
		}
	}
	if len(storedIDs) != 1 || invSnapshotCount(t, e, nodeID) != count+1 {
		t.Fatalf("8 concurrent equal reports stored %v (%d -> %d snapshots)", storedIDs, count, invSnapshotCount(t, e, nodeID))
	}
	for _, r := range results {
		if _, ok := storedIDs[obj(t, r.Body, "snapshot")["id"]]; !ok {
			t.Fatalf("concurrent report returned another snapshot: %s", r.Raw)
		}
	}

	// Snapshots are append-only: the database refuses an UPDATE.
	if _, err := e.DB.ExecContext(context.Background(), `UPDATE inventory_snapshots SET collected_at = now() WHERE snapshot_id = $1`, first["id"]); err == nil {
		t.Fatal("UPDATE of inventory_snapshots succeeded")
	}
	if _, err := e.DB.ExecContext(context.Background(), `UPDATE inventory_snapshots SET hash = $2 WHERE node_id = $1`, nodeID, strings.Repeat("0", 64)); err == nil {
		t.Fatal("UPDATE of inventory_snapshots succeeded")
	}
	g := e.Must(e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": nodeID, "limit": 100}))
	hist := items(t, g)
	if s := hist[len(hist)-1]; s["id"] != first["id"] || s["hash"] != first["hash"] || s["collectedAt"] != first["collectedAt"] {
		t.Fatalf("first snapshot changed: %v, was %v", s, first)
	}
}

func TestInventoryReportRefusals(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)
	otherID, otherCred := e.Node(admin, "acme", pool)

	// The body limit is 256 KiB: exactly the limit passes the size check,
	// one byte more is PAYLOAD_TOO_LARGE.
	head, tail := `{"nodeId":"`+nodeID+`","sections":{}`, `}`
	pad := func(n int) string { return head + strings.Repeat(" ", n-len(head)-len(tail)) + tail }
	expect(t, e.Call(cred, "inventory/report", pad(invReportLimit)), "", "")
	expect(t, e.Call(cred, "inventory/report", pad(invReportLimit+1)), "PAYLOAD_TOO_LARGE", anyPath)
	big := h100(t)
	gpus := invGPUs(big)
	for i := 0; i < 64-len(invGPUs(h100(t))); i++ {
		gpus = append(gpus, map[string]any{"uuid": fmt.Sprintf("GPU-%04d-%s", i, strings.Repeat("a", 100)), "model": strings.Repeat("m", 256)})
	}
	big["gpus"] = gpus
	for i := 0; i < 250; i++ {
		big["disks"] = append(invDisks(big), map[string]any{"wwn": fmt.Sprintf("wwn-%d-%s", i, strings.Repeat("w", 100)), "model": strings.Repeat("d", 256), "serial": strings.Repeat("s", 256), "slot": fmt.Sprintf("bay-%d-%s", i, strings.Repeat("b", 100))})
		big["nics"] = append(big["nics"].([]any), map[string]any{"mac": fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), "name": strings.Repeat("n", 256)})
	}
	if b, _ := json.Marshal(big); len(b) <= invReportLimit {
		t.Fatalf("test bug: big report is only %d bytes", len(b))
	}
	expect(t, invReport(t, e, cred, nodeID, big), "PAYLOAD_TOO_LARGE", anyPath)
	expect(t, e.Call(cred, "inventory/report", head[:len(head)-2]+`{"system":{"vendor":"`+strings.Repeat("x", 300<<10)+`"}}}`), "PAYLOAD_TOO_LARGE", anyPath)

	gpuList := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"uuid":"GPU-%d","index":%d}`, i, i%256)
		}
		return `{"gpus":[` + strings.Join(parts, ",") + `]}`
	}
	// 64 GPUs are fine.
	expect(t, invReport(t, e, cred, nodeID, gpuList(64)), "", "")

	deepArr := func(n int) string { return `{"gpus":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}` }
	for _, tc := range []struct {
		name, sections, path string
	}{
		{"sections not an object", `[]`, "sections"},
		{"sections a string", `"gpus"`, "sections"},
		{"gpus an object", `{"gpus":{"uuid":"GPU-1"}}`, "sections.gpus"},
		{"gpu a string", `{"gpus":["GPU-1"]}`, "sections.gpus[0]"},
		{"memoryMiB a string", `{"gpus":[{"uuid":"GPU-1","memoryMiB":"81559"}]}`, "sections.gpus[0].memoryMiB"},
		{"index a boolean", `{"gpus":[{"uuid":"GPU-1"},{"uuid":"GPU-2","index":true}]}`, "sections.gpus[1].index"},
		{"drivers an array", `{"drivers":["nvidia"]}`, "sections.drivers"},
		{"driver version a number", `{"drivers":{"nvidia":550}}`, "sections.drivers.nvidia"},
		{"system a string", `{"system":"dell"}`, "sections.system"},
		{"unknown section", `{"system":{},"bogus":{}}`, "sections.bogus"},
		{"unknown gpu field", `{"gpus":[{"uuid":"GPU-1","color":"green"}]}`, "sections.gpus[0].color"},
		{"unknown disk field", `{"disks":[{"wwn":"eui.1","temperature":30}]}`, "sections.disks[0].temperature"},
		{"unknown system field", `{"system":{"vendor":"Dell","rack":"r1"}}`, "sections.system.rack"},
		{"65 gpus", gpuList(65), "sections.gpus"},
		{"gpu without uuid", `{"gpus":[{"index":0}]}`, "sections.gpus[0].uuid"},
		{"duplicate gpu uuid", `{"gpus":[{"uuid":"GPU-1"},{"uuid":"GPU-2"},{"uuid":"GPU-1"}]}`, "sections.gpus[2].uuid"},
		{"duplicate mig uuid", `{"gpus":[{"uuid":"GPU-1","migMode":"enabled","migDevices":[{"profile":"1g.10gb","uuid":"MIG-1"},{"profile":"1g.10gb","uuid":"MIG-1"}]}]}`, "sections.gpus[0].migDevices[1].uuid"},
		{"bad migMode", `{"gpus":[{"uuid":"GPU-1","migMode":"on"}]}`, "sections.gpus[0].migMode"},
		{"duplicate disk wwn", `{"disks":[{"wwn":"eui.1","slot":"nvme0"},{"wwn":"eui.1","slot":"nvme1"}]}`, "sections.disks[1].wwn"},
		{"duplicate disk slot", `{"disks":[{"wwn":"eui.1","slot":"nvme0"},{"wwn":"eui.2","slot":"nvme0"}]}`, "sections.disks[1].slot"},
		{"duplicate mac differing in case", `{"nics":[{"mac":"b8:3f:d2:4a:91:e0"},{"mac":"B8:3F:D2:4A:91:E0"}]}`, "sections.nics[1].mac"},
		{"bad mac", `{"nics":[{"mac":"b8-3f-d2-4a-91-e0"}]}`, "sections.nics[0].mac"},
		{"deep arrays", deepArr(12), "sections.gpus[0]"},
		{"deep objects", `{"system":{"vendor":{"a":{"b":{"c":{"d":{"e":{"f":{"g":{}}}}}}}}}}`, "sections.system.vendor"},
		{"deep mig", `{"gpus":[{"uuid":"GPU-1","migDevices":[{"profile":[[[[[[[[[[1]]]]]]]]]]}]}]}`, "sections.gpus[0].migDevices[0].profile"},
		{"duplicate section key", `{"drivers":{"nvidia":"550"},"drivers":{"nvidia":"560"}}`, "sections.drivers"},
		{"duplicate gpu key", `{"gpus":[{"uuid":"GPU-1","uuid":"GPU-2"}]}`, "sections.gpus[0].uuid"},
		{"duplicate driver key", `{"drivers":{"nvidia":"550","cuda":"12.4","nvidia":"560"}}`, "sections.drivers.nvidia"},
		{"float memoryMiB", `{"gpus":[{"uuid":"GPU-1","memoryMiB":81559.5}]}`, "sections.gpus[0].memoryMiB"},
		{"float cores", `{"cpu":{"cores":112.25}}`, "sections.cpu.cores"},
		{"float sizeBytes", `{"disks":[{"wwn":"eui.1","sizeBytes":1e-3}]}`, "sections.disks[0].sizeBytes"},
		{"negative speed", `{"nics":[{"mac":"b8:3f:d2:4a:91:e0","speedMbps":-1}]}`, "sections.nics[0].speedMbps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, invReport(t, e, otherCred, otherID, tc.sections), "INVALID_INPUT", tc.path)
		})
	}
	// Nesting beyond what the body decoder takes (32 levels) is refused
	// before the sections decoder sees it, with the path where it went over.
	for _, n := range []int{40, 100000} {
		r := invReport(t, e, otherCred, otherID, deepArr(n))
		expect(t, r, "INVALID_INPUT", anyPath)
		if p := r.Path(); !strings.HasPrefix(p, "sections.gpus") {
			t.Fatalf("nesting %d: details.path %q", n, p)
		}
	}
	// A refused report stores nothing.
	if n := invSnapshotCount(t, e, otherID); n != 0 {
		t.Fatalf("refused reports stored %d snapshots", n)
	}

	// Credentials: only the node's own.
	good := map[string]any{"nodeId": otherID, "sections": h100(t)}
	for _, tok := range []string{admin, member, viewer, e.Operator} {
		expect(t, e.Call(tok, "inventory/report", good), "PERMISSION_DENIED", anyPath)
	}
	expect(t, e.Call(cred, "inventory/report", good), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call("", "inventory/report", good), "UNAUTHENTICATED", anyPath)
	expect(t, e.Call("bcn_not-a-real-token", "inventory/report", good), "UNAUTHENTICATED", anyPath)
	if n := invSnapshotCount(t, e, otherID); n != 0 {
		t.Fatalf("denied reports stored %d snapshots", n)
	}
	// A node credential reads nothing, not even its own inventory.
	expect(t, e.Call(otherCred, "inventory/get", invNode("acme", otherID)), "PERMISSION_DENIED", anyPath)

	// Input shape.
	for _, tc := range []struct {
		body any
		path string
	}{
		{map[string]any{"nodeId": "node_123", "sections": map[string]any{}}, "nodeId"},
		{map[string]any{"nodeId": strings.ToUpper(otherID), "sections": map[string]any{}}, "nodeId"},
		{map[string]any{"nodeId": "pool_01jd0000000000000000000000", "sections": map[string]any{}}, "nodeId"},
		{map[string]any{"nodeId": 7, "sections": map[string]any{}}, "nodeId"},
		{map[string]any{"sections": map[string]any{}}, "nodeId"},
		{map[string]any{"nodeId": otherID}, "sections"},
		{map[string]any{"nodeId": otherID, "sections": map[string]any{}, "tenantId": "acme"}, "tenantId"},
		{`{"nodeId":"` + otherID + `","nodeId":"` + otherID + `","sections":{}}`, "nodeId"},
	} {
		expect(t, e.Call(otherCred, "inventory/report", tc.body), "INVALID_INPUT", tc.path)
	}
	// And the node's own credential does report.
	if r := e.Must(e.Call(otherCred, "inventory/report", good)); r.Body["stored"] != true {
		t.Fatalf("own report: %s", r.Raw)
	}
}

func TestInventoryGet(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	gAdmin, _, gViewer := e.Tenant("globex")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)
	gPool := e.Pool(gAdmin, "globex", "gpu-g")
	gNode, gCred := e.Node(gAdmin, "globex", gPool)

	snap := invStore(t, e, cred, nodeID, h100(t))
	changed := h100(t)
	changed["os"].(map[string]any)["kernel"] = "6.8.0-45-generic"
	latest := invStore(t, e, cred, nodeID, changed)
	invStore(t, e, gCred, gNode, h100(t))

	for _, tok := range []string{admin, member, viewer} {
		r := e.Call(tok, "inventory/get", invNode("acme", nodeID))
		expect(t, r, "", "")
		s := invSnap(t, r.Body, nodeID)
		if s["id"] != latest["id"] || s["hash"] != latest["hash"] || s["id"] == snap["id"] {
			t.Fatalf("get is not the latest: %s", r.Raw)
		}
	}
	// Another tenant's node is NOT_FOUND for that tenant naming itself, and
	// naming a tenant without a role is PERMISSION_DENIED.
	expect(t, e.Call(gAdmin, "inventory/get", invNode("globex", nodeID)), "NOT_FOUND", anyPath)
	expect(t, e.Call(gViewer, "inventory/get", invNode("globex", nodeID)), "NOT_FOUND", anyPath)
	expect(t, e.Call(viewer, "inventory/get", invNode("acme", gNode)), "NOT_FOUND", anyPath)
	expect(t, e.Call(gAdmin, "inventory/get", invNode("acme", nodeID)), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(admin, "inventory/get", invNode("globex", gNode)), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(admin, "inventory/get", invNode("nosuch", nodeID)), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(admin, "inventory/get", invNode(strings.Repeat("t", 128), nodeID)), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(admin, "inventory/get", invNode("acme", "node_01jd0000000000000000000000")), "NOT_FOUND", anyPath)
	expect(t, e.Call("", "inventory/get", invNode("acme", nodeID)), "UNAUTHENTICATED", anyPath)
	// A node of the tenant without a report yet.
	fresh, _ := e.Node(admin, "acme", pool)
	expect(t, e.Call(viewer, "inventory/get", invNode("acme", fresh)), "NOT_FOUND", anyPath)

	for _, tc := range []struct {
		body map[string]any
		path string
	}{
		{invNode(strings.Repeat("t", 129), nodeID), "tenantId"},
		{invNode("bad tenant", nodeID), "tenantId"},
		{invNode("", nodeID), "tenantId"},
		{invNode("acme/x", nodeID), "tenantId"},
		{map[string]any{"nodeId": nodeID}, "tenantId"},
		{map[string]any{"tenantId": 1, "nodeId": nodeID}, "tenantId"},
		{invNode("acme", "node_"), "nodeId"},
		{invNode("acme", "node_01jd000000000000000000000"), "nodeId"},  // 25 characters
		{invNode("acme", "node_01JD0000000000000000000000"), "nodeId"}, // uppercase
		{invNode("acme", "node_01jd000000000000000000000u"), "nodeId"}, // u is not in the alphabet
		{invNode("acme", "inv_01jd0000000000000000000000"), "nodeId"},  // another prefix
		{invNode("acme", " "+nodeID), "nodeId"},
		{map[string]any{"tenantId": "acme"}, "nodeId"},
		{map[string]any{"tenantId": "acme", "nodeId": nodeID, "limit": 1}, "limit"},
		{map[string]any{"tenantId": "acme", "nodeId": nodeID, "snapshotId": snap["id"]}, "snapshotId"},
	} {
		expect(t, e.Call(viewer, "inventory/get", tc.body), "INVALID_INPUT", tc.path)
	}
}

func TestInventoryHistory(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")
	gAdmin, _, _ := e.Tenant("globex")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)
	emptyID, _ := e.Node(admin, "acme", pool)

	// A node with no snapshots has an empty last page.
	r := e.Must(e.Call(viewer, "inventory/history", invNode("acme", emptyID)))
	if len(items(t, r)) != 0 || r.Body["cursor"] != nil {
		t.Fatalf("empty history: %s", r.Raw)
	}

	// 25 changed snapshots (an equal report in between adds none).
	var ids []string
	for i := 0; i < 25; i++ {
		s := h100(t)
		s["firmware"].(map[string]any)["bmc"] = fmt.Sprintf("7.00.%02d.00", i)
		at := time.Date(2024, 5, 1, 12, i, 0, 0, time.UTC).Format(time.RFC3339)
		ids = append(ids, str(invStore(t, e, cred, nodeID, s, at)["id"]))
		if i == 10 {
			if again := e.Must(invReport(t, e, cred, nodeID, s)); again.Body["stored"] != false {
				t.Fatalf("equal report stored: %s", again.Raw)
			}
		}
	}
	newest := make([]string, len(ids))
	minute := map[string]int{}
	for i, id := range ids {
		newest[len(ids)-1-i] = id
		minute[id] = i
	}
	pageIDs := func(r testkit.Resp) []string {
		var out []string
		for _, it := range items(t, r) {
			invSnap(t, it, nodeID)
			out = append(out, str(it["id"]))
			// each item is the snapshot of its report, collectedAt included
			k, ok := minute[str(it["id"])]
			if want := time.Date(2024, 5, 1, 12, k, 0, 0, time.UTC).Format(time.RFC3339); !ok || it["collectedAt"] != want {
				t.Fatalf("item %s collectedAt %v, want %s", it["id"], it["collectedAt"], want)
			}
		}
		return out
	}

	// Default limit 20, then the remaining 5 with a null cursor.
	p1 := e.Must(e.Call(viewer, "inventory/history", invNode("acme", nodeID)))
	got := pageIDs(p1)
	if !reflect.DeepEqual(got, newest[:20]) {
		t.Fatalf("page 1: %v, want %v", got, newest[:20])
	}
	if p1.Body["cursor"] != newest[19] {
		t.Fatalf("page 1 cursor %v, want the last id %s", p1.Body["cursor"], newest[19])
	}
	p2 := e.Must(e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": nodeID, "cursor": p1.Body["cursor"]}))
	if got := pageIDs(p2); !reflect.DeepEqual(got, newest[20:]) || p2.Body["cursor"] != nil {
		t.Fatalf("page 2: %s", p2.Raw)
	}
	// Max 100; exactly the count of items gives no further page.
	for _, n := range []int{100, 25} {
		r := e.Must(e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": nodeID, "limit": n}))
		if got := pageIDs(r); !reflect.DeepEqual(got, newest) || r.Body["cursor"] != nil {
			t.Fatalf("limit %d: %s", n, r.Raw)
		}
	}
	r = e.Must(e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": nodeID, "limit": 24}))
	if got := pageIDs(r); !reflect.DeepEqual(got, newest[:24]) || r.Body["cursor"] != newest[23] {
		t.Fatalf("limit 24: %s", r.Raw)
	}

	// Limit 1 walks every snapshot exactly once, in order.
	var walked []string
	cursor := any(nil)
	for pages := 0; ; pages++ {
		if pages > 30 {
			t.Fatal("paging does not end")
		}
		body := map[string]any{"tenantId": "acme", "nodeId": nodeID, "limit": 1}
		if cursor != nil {
			body["cursor"] = cursor
		}
		r := e.Must(e.Call(viewer, "inventory/history", body))
		got := pageIDs(r)
		if len(got) != 1 {
			t.Fatalf("page %d: %s", pages, r.Raw)
		}
		walked = append(walked, got[0])
		cursor = r.Body["cursor"]
		if cursor == nil {
			break
		}
		if cursor != got[0] {
			t.Fatalf("cursor %v is not the last id %s", cursor, got[0])
		}
	}
	if !reflect.DeepEqual(walked, newest) {
		t.Fatalf("limit 1 walk: %v, want %v", walked, newest)
	}
	// The graph's ComputeNode.inventoryHistory has the method's cursors
	// (the snapshot ids, as the seed fixes them): either continues the
	// other.
	hq := `query($id: ID!, $after: String) { node(id: $id) { ... on ComputeNode { inventoryHistory(first: 2, after: $after) {
		pageInfo { endCursor } edges { cursor node { snapshotId } } } } } }`
	gid := relay.ID("ComputeNode", nodeID)
	hist := dig(t, gqlOK(t, e.GraphQL(viewer, hq, map[string]any{"id": gid, "after": p1.Body["cursor"]})), "node", "inventoryHistory")
	hn := nodesOf(t, hist)
	if len(hn) != 2 || hn[0]["snapshotId"] != newest[20] || dig(t, hist, "pageInfo", "endCursor") != newest[21] {
		t.Fatalf("the method's cursor in the graph: %v", hist)
	}
	r = e.Must(e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": nodeID, "limit": 1, "cursor": dig(t, hist, "pageInfo", "endCursor")}))
	if got := pageIDs(r); !reflect.DeepEqual(got, newest[22:23]) {
		t.Fatalf("the graph's cursor on the method: %s", r.Raw)
	}
	gqlExpect(t, e.GraphQL(viewer, hq, map[string]any{"id": gid, "after": "inv_short"}), "INVALID_INPUT", "after")
	// first left out, null, or a null variable: the method's default of
	// 20 (an explicit null took the graph's general 50).
	dq0 := `query($id: ID!, $f: Int) { node(id: $id) { ... on ComputeNode { a: inventoryHistory { edges { cursor } }
		b: inventoryHistory(first: null) { edges { cursor } } c: inventoryHistory(first: $f) { edges { cursor } } } } }`
	for k, v := range dig(t, gqlOK(t, e.GraphQL(viewer, dq0, map[string]any{"id": gid, "f": nil})), "node").(map[string]any) {
		if n := len(v.(map[string]any)["edges"].([]any)); n != 20 {
			t.Errorf("inventoryHistory %s: %d edges, want the default 20", k, n)
		}
	}
	// The node's latest snapshot id, as nodes.get answers it.
	lq := `query($id: ID!) { node(id: $id) { ... on ComputeNode { latestSnapshotId inventory { snapshotId } } } }`
	ln, _ := dig(t, gqlOK(t, e.GraphQL(viewer, lq, map[string]any{"id": gid})), "node").(map[string]any)
	if ln["latestSnapshotId"] != newest[0] || dig(t, ln, "inventory", "snapshotId") != newest[0] {
		t.Fatalf("latestSnapshotId: %v, want %s", ln, newest[0])
	}
	// A malformed snapshot name is refused in the method's words.
	dq := `query($id: ID!, $f: String, $t: String) { node(id: $id) { ... on ComputeNode { inventoryDiff(from: $f, to: $t) { from } } } }`
	for _, v := range []string{"f", "t"} {
		r := e.GraphQL(viewer, dq, map[string]any{"id": gid, v: "inv_short"})
		gqlExpect(t, r, "INVALID_INPUT", map[string]string{"f": "from", "t": "to"}[v])
		if !strings.Contains(string(r.Raw), "does not match ^(inv_") {
			t.Fatalf("the method's words: %s", r.Raw)
		}
	}

	for _, tc := range []struct {
		body map[string]any
		path string
	}{
		{map[string]any{"limit": 101}, "limit"},
		{map[string]any{"limit": 0}, "limit"},
		{map[string]any{"limit": -1}, "limit"},
		{map[string]any{"limit": 2.5}, "limit"},
		{map[string]any{"limit": "10"}, "limit"},
		{map[string]any{"cursor": "garbage"}, "cursor"},
		{map[string]any{"cursor": "inv_short"}, "cursor"},
		{map[string]any{"cursor": strings.ToUpper(ids[3])}, "cursor"},
		{map[string]any{"cursor": strings.Repeat("a", 64)}, "cursor"}, // a hash is not a cursor
		{map[string]any{"cursor": 5}, "cursor"},
		{map[string]any{"from": ids[0]}, "from"},
		{map[string]any{"tenantId": "bad tenant"}, "tenantId"},
		{map[string]any{"nodeId": "node_x"}, "nodeId"},
	} {
		body := map[string]any{"tenantId": "acme", "nodeId": nodeID}
		for k, v := range tc.body {
			body[k] = v
		}
		expect(t, e.Call(viewer, "inventory/history", body), "INVALID_INPUT", tc.path)
	}

	// NOT_FOUND for a node the tenant does not own, with or without a cursor.
	expect(t, e.Call(gAdmin, "inventory/history", invNode("globex", nodeID)), "NOT_FOUND", anyPath)
	expect(t, e.Call(gAdmin, "inventory/history", map[string]any{"tenantId": "globex", "nodeId": nodeID, "cursor": ids[5]}), "NOT_FOUND", anyPath)
	expect(t, e.Call(gAdmin, "inventory/history", invNode("acme", nodeID)), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(viewer, "inventory/history", invNode("acme", "node_01jd0000000000000000000000")), "NOT_FOUND", anyPath)
	// The cursor names a snapshot of this node: another node's snapshot id
	// (it cut the page where that id sorted) or an id never issued is
	// INVALID_INPUT at cursor, as events.list refuses another stream's, on
	// both surfaces.
	for _, c := range []string{ids[24], "inv_zzzzzzzzzzzzzzzzzzzzzzzzzz"} {
		r = e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": emptyID, "cursor": c})
		expect(t, r, "INVALID_INPUT", "cursor")
		if r.Message() != "cursor is not a snapshot of node "+emptyID {
			t.Fatalf("%s", r.Raw)
		}
		gqlExpect(t, e.GraphQL(viewer, hq, map[string]any{"id": relay.ID("ComputeNode", emptyID), "after": c}), "INVALID_INPUT", "after")
	}
}

func TestInventoryDiffSelection(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")
	gAdmin, _, _ := e.Tenant("globex")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)
	otherID, otherCred := e.Node(admin, "acme", pool)
	emptyID, _ := e.Node(admin, "acme", pool)

	// No inventory yet.
	expect(t, e.Call(viewer, "inventory/diff", invNode("acme", nodeID)), "NOT_FOUND", anyPath)
	expect(t, e.Call(viewer, "inventory/diff", invNode("acme", emptyID)), "NOT_FOUND", anyPath)
	expect(t, e.Call(viewer, "inventory/diff", invDiffBody("acme", emptyID, strings.Repeat("a", 64), "")), "NOT_FOUND", anyPath)

	base := h100(t)
	s1 := invStore(t, e, cred, nodeID, base)
	id1, h1 := str(s1["id"]), str(s1["hash"])

	// A single snapshot diffs against nothing.
	r := e.Must(e.Call(viewer, "inventory/diff", invNode("acme", nodeID)))
	if !strings.Contains(string(r.Raw), `"changes":[]`) || !strings.Contains(string(r.Raw), `"from":""`) {
		t.Fatalf("single snapshot diff: %s", r.Raw)
	}
	invDiff(t, e, viewer, "acme", nodeID, "", "", "", id1)
	invDiff(t, e, viewer, "acme", nodeID, "", id1, "", id1)
	invDiff(t, e, viewer, "acme", nodeID, "", h1, "", id1)

	v2 := h100(t)
	v2["drivers"].(map[string]any)["nvidia"] = "550.127.05"
	s2 := invStore(t, e, cred, nodeID, v2)
	id2, h2 := str(s2["id"]), str(s2["hash"])
	v3 := h100(t)
	v3["drivers"].(map[string]any)["nvidia"] = "550.127.05"
	gone := invGPUs(v3)[7]
	v3["gpus"] = invGPUs(v3)[:7]
	s3 := invStore(t, e, cred, nodeID, v3)
	id3, h3 := str(s3["id"]), str(s3["hash"])

	driver := invChange{Type: "driver.changed", DeviceID: "nvidia", Before: "550.90.07", After: "550.127.05"}
	missing := invChange{Type: "gpu.missing", DeviceID: str(gone.(map[string]any)["uuid"]), Before: gone, After: nil}
	added := invChange{Type: "gpu.added", DeviceID: missing.DeviceID, Before: nil, After: gone}
	back := invChange{Type: "driver.changed", DeviceID: "nvidia", Before: "550.127.05", After: "550.90.07"}

	// Neither: latest against the one before.
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, "", "", id2, id3), missing)
	// to only: that against the one before it.
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, "", id2, id1, id2), driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, "", h2, id1, id2), driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, "", id3, id2, id3), missing)
	// to = the first snapshot, no from: against nothing.
	if cs := invDiff(t, e, viewer, "acme", nodeID, "", id1, "", id1); len(cs) != 0 {
		t.Fatalf("first snapshot diff: %v", cs)
	}
	// from only: against the latest.
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, id1, "", id1, id3), missing, driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, h1, "", id1, id3), missing, driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, id2, "", id2, id3), missing)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, id3, "", id3, id3))
	// Both, by id, by hash, mixed, and backwards.
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, id1, id2, id1, id2), driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, h1, h2, id1, id2), driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, id1, h3, id1, id3), missing, driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, h1, id3, id1, id3), missing, driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, id3, id1, id3, id1), added, back)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, h2, h2, id2, id2))
	// Deterministic: the same diff twice is the same bytes.
	a := e.Must(e.Call(viewer, "inventory/diff", invDiffBody("acme", nodeID, id3, id1)))
	b := e.Must(e.Call(admin, "inventory/diff", invDiffBody("acme", nodeID, id3, id1)))
	if string(a.Raw) != string(b.Raw) {
		t.Fatalf("diff is not deterministic:\n%s\n%s", a.Raw, b.Raw)
	}

	// The other node of the tenant has its own snapshots.
	o1 := invStore(t, e, otherCred, otherID, v2)
	o2 := invStore(t, e, otherCred, otherID, v3)
	oh := h100(t)
	oh["os"].(map[string]any)["name"] = "Debian"
	o3 := invStore(t, e, otherCred, otherID, oh)

	// NOT_FOUND for references that name no snapshot of this node, with the
	// path of the reference.
	missingID := "inv_01jd0000000000000000000000"
	for _, tc := range []struct {
		from, to, path string
	}{
		{missingID, "", "from"},
		{"", missingID, "to"},
		{strings.Repeat("0", 64), "", "from"},
		{"", strings.Repeat("0", 64), "to"},
		{str(o1["id"]), "", "from"},             // another node's snapshot id
		{"", str(o2["id"]), "to"},               // another node's snapshot id
		{id1, str(o3["id"]), "to"},              // with a real from
		{str(o3["hash"]), id3, "from"},          // another node's hash
		{"", str(o3["hash"]), "to"},             // another node's hash
		{str(o1["id"]), str(o2["id"]), anyPath}, // both another node's
	} {
		r := e.Call(viewer, "inventory/diff", invDiffBody("acme", nodeID, tc.from, tc.to))
		expect(t, r, "NOT_FOUND", anyPath)
		if tc.path != anyPath {
			if p := r.Path(); p != "" && p != tc.path {
				t.Fatalf("from=%q to=%q: details.path %q, want %q", tc.from, tc.to, p, tc.path)
			}
		}
	}
	// And the other node's own references work on it.
	invWantChanges(t, invDiff(t, e, viewer, "acme", otherID, str(o1["id"]), str(o2["hash"]), str(o1["id"]), str(o2["id"])), missing)

	// A hash names the newest snapshot with that hash.
	s4 := invStore(t, e, cred, nodeID, base) // the content of s1 again
	id4 := str(s4["id"])
	if s4["hash"] != h1 {
		t.Fatalf("same content, other hash: %v", s4)
	}
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, "", h1, id3, id4), added, back)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, h1, id3, id4, id3), missing, driver)
	invWantChanges(t, invDiff(t, e, viewer, "acme", nodeID, id1, id4, id1, id4))

	// Not owned: NOT_FOUND; naming a tenant without a role: PERMISSION_DENIED.
	for _, body := range []map[string]any{invNode("globex", nodeID), invDiffBody("globex", nodeID, id1, id2), invDiffBody("globex", nodeID, h1, "")} {
		expect(t, e.Call(gAdmin, "inventory/diff", body), "NOT_FOUND", anyPath)
	}
	expect(t, e.Call(gAdmin, "inventory/diff", invDiffBody("acme", nodeID, id1, id2)), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(viewer, "inventory/diff", invNode("acme", "node_01jd0000000000000000000000")), "NOT_FOUND", anyPath)

	// Reference patterns.
	for _, bad := range []string{
		strings.ToUpper(h1),             // uppercase hex
		h1[:63],                         // 63 hex
		h1 + "0",                        // 65 hex
		"inv_01jd000000000000000000000", // 25 characters after inv_
		"inv_",
		strings.ToUpper(id1),
		"INV_" + id1[4:],
		"node_" + id1[4:],
		id1 + " ",
		"g" + h1[1:],
		"latest",
	} {
		for _, field := range []string{"from", "to"} {
			body := invNode("acme", nodeID)
			body[field] = bad
			expect(t, e.Call(viewer, "inventory/diff", body), "INVALID_INPUT", field)
		}
	}
	expect(t, e.Call(viewer, "inventory/diff", map[string]any{"tenantId": "acme", "nodeId": nodeID, "from": 5}), "INVALID_INPUT", "from")
	expect(t, e.Call(viewer, "inventory/diff", map[string]any{"tenantId": "acme", "nodeId": nodeID, "since": id1}), "INVALID_INPUT", "since")
	expect(t, e.Call(viewer, "inventory/diff", invNode("bad tenant", nodeID)), "INVALID_INPUT", "tenantId")
	expect(t, e.Call(viewer, "inventory/diff", invNode("acme", "node_")), "INVALID_INPUT", "nodeId")
}

func TestInventoryDiffChangeTypes(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)

	prev := str(invStore(t, e, cred, nodeID, h100(t))["id"])
	// step stores sections and returns the diff from the previous snapshot.
	step := func(s map[string]any) []invChange {
		t.Helper()
		id := str(invStore(t, e, cred, nodeID, s)["id"])
		cs := invDiff(t, e, viewer, "acme", nodeID, "", "", prev, id)
		prev = id
		return cs
	}
	gpuOf := func(s map[string]any, i int) map[string]any { return invGPUs(s)[i].(map[string]any) }
	diskOf := func(s map[string]any, i int) map[string]any { return invDisks(s)[i].(map[string]any) }

	// Remove a GPU: gpu.missing, before the GPU, after null.
	s := h100(t)
	g3 := gpuOf(s, 3)
	s["gpus"] = append(append([]any{}, invGPUs(s)[:3]...), invGPUs(s)[4:]...)
	invWantChanges(t, step(s), invChange{Type: "gpu.missing", DeviceID: str(g3["uuid"]), Before: g3, After: nil})
	// Add it back (at the end): gpu.added.
	s["gpus"] = append(invGPUs(s), g3)
	invWantChanges(t, step(s), invChange{Type: "gpu.added", DeviceID: str(g3["uuid"]), Before: nil, After: g3})
	// Reordering GPUs, a NIC speed, firmware and the OS are no diff types.
	s = h100(t)
	gs := invGPUs(s)
	gs[0], gs[1] = gs[1], gs[0]
	s["nics"].([]any)[0].(map[string]any)["speedMbps"] = 200000
	s["firmware"].(map[string]any)["bios"] = "1.7.0"
	s["os"].(map[string]any)["kernel"] = "6.8.0-45-generic"
	invWantChanges(t, step(s))

	// Swap the disk in a slot (new WWN): disk.replaced, deviceId the new WWN.
	s = h100(t)
	oldDisk := diskOf(s, 2)
	newDisk := map[string]any{"wwn": "eui.36344730526015990025384500000001", "serial": "S6CSNA0W409999", "model": "SAMSUNG MZWLR3T8HCLS-00A07", "sizeBytes": 3840755982336, "slot": "nvme2"}
	invDisks(s)[2] = newDisk
	invWantChanges(t, step(s), invChange{Type: "disk.replaced", DeviceID: str(newDisk["wwn"]), Before: oldDisk, After: newDisk})
	// The same disk with another serial or size in its slot is no replacement.
	diskOf(s, 2)["sizeBytes"] = 3840755982337
	invWantChanges(t, step(s))
	diskOf(s, 2)["sizeBytes"] = 3840755982336
	invWantChanges(t, step(s))
	// A disk leaves its slot: before the disk, after null.
	leaving := diskOf(s, 3)
	s["disks"] = invDisks(s)[:3]
	invWantChanges(t, step(s), invChange{Type: "disk.replaced", DeviceID: str(leaving["wwn"]), Before: leaving, After: nil})
	// A disk arrives in a slot: before null.
	arriving := map[string]any{"wwn": "naa.5000c500a1b2c3d4", "model": "ST8000NM000A", "sizeBytes": 8001563222016, "slot": "sata0"}
	s["disks"] = append(invDisks(s), arriving)
	invWantChanges(t, step(s), invChange{Type: "disk.replaced", DeviceID: str(arriving["wwn"]), Before: nil, After: arriving})

	// The nvidia driver version changes: driver.changed, deviceId nvidia.
	s["drivers"].(map[string]any)["nvidia"] = "560.35.03"
	invWantChanges(t, step(s), invChange{Type: "driver.changed", DeviceID: "nvidia", Before: "550.90.07", After: "560.35.03"})

	// MIG mode on a GPU: mig.layout.changed, deviceId the GPU's UUID.
	g0 := gpuOf(s, 0)
	g0["migMode"] = "enabled"
	g0["migDevices"] = []any{
		map[string]any{"profile": "3g.40gb", "uuid": "MIG-4f0c1b2a-9e8d-5c7b-a6f5-e4d3c2b1a091"},
		map[string]any{"profile": "3g.40gb", "uuid": "MIG-4f0c1b2a-9e8d-5c7b-a6f5-e4d3c2b1a092"},
	}
	cs := step(s)
	if len(cs) != 1 || cs[0].Type != "mig.layout.changed" || cs[0].DeviceID != str(g0["uuid"]) {
		t.Fatalf("migMode change: %v", invTypes(cs))
	}
	if bm, _ := cs[0].Before.(map[string]any); bm["migMode"] != "disabled" || len(invList(bm["migDevices"])) != 0 {
		t.Fatalf("mig before: %#v", cs[0].Before)
	}
	if am, _ := cs[0].After.(map[string]any); am["migMode"] != "enabled" || !reflect.DeepEqual(am["migDevices"], invNorm(t, g0["migDevices"])) {
		t.Fatalf("mig after: %#v", cs[0].After)
	}
	// The MIG devices change, the mode stays: mig.layout.changed.
	oldMIG := invNorm(t, g0["migDevices"])
	g0["migDevices"] = []any{
		map[string]any{"profile": "1g.10gb", "uuid": "MIG-4f0c1b2a-9e8d-5c7b-a6f5-e4d3c2b1a093"},
		map[string]any{"profile": "3g.40gb", "uuid": "MIG-4f0c1b2a-9e8d-5c7b-a6f5-e4d3c2b1a092"},
	}
	cs = step(s)
	if len(cs) != 1 || cs[0].Type != "mig.layout.changed" || cs[0].DeviceID != str(g0["uuid"]) {
		t.Fatalf("migDevices change: %v", invTypes(cs))
	}
	if bm, _ := cs[0].Before.(map[string]any); bm["migMode"] != "enabled" || !reflect.DeepEqual(bm["migDevices"], oldMIG) {
		t.Fatalf("mig before: %#v", cs[0].Before)
	}
	if am, _ := cs[0].After.(map[string]any); am["migMode"] != "enabled" || !reflect.DeepEqual(am["migDevices"], invNorm(t, g0["migDevices"])) {
		t.Fatalf("mig after: %#v", cs[0].After)
	}
	// The same MIG devices in another order are the same layout.
	md := g0["migDevices"].([]any)
	md[0], md[1] = md[1], md[0]
	invWantChanges(t, step(s))

	// Many changes at once, from the fixture: the exact list, ordered by
	// type (missing, added, replaced, driver, mig), then device id.
	base := h100(t)
	baseID := str(invStore(t, e, cred, nodeID, base)["id"])
	m := h100(t)
	mg := invGPUs(m)
	gMissing1, gMissing2 := mg[1].(map[string]any), mg[6].(map[string]any)
	gNew1 := map[string]any{"uuid": "GPU-ffffffff-0000-4000-8000-000000000001", "index": 1, "model": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559, "pciBusId": "00000000:2A:00.0", "migMode": "disabled"}
	gNew2 := map[string]any{"uuid": "GPU-00000000-0000-4000-8000-000000000002", "index": 6, "model": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559, "pciBusId": "00000000:BA:00.0", "migMode": "disabled"}
	mg[1], mg[6] = gNew1, gNew2
	g5 := mg[5].(map[string]any)
	g5Before := invNorm(t, g5).(map[string]any)
	g5["migMode"] = "enabled"
	g5["migDevices"] = []any{map[string]any{"profile": "7g.80gb", "uuid": "MIG-aaaaaaaa-0000-4000-8000-000000000001"}}
	g2 := mg[2].(map[string]any)
	g2Before := invNorm(t, g2).(map[string]any)
	g2["migMode"] = "enabled"
	md0 := invDisks(m)
	d0, d1, d3 := md0[0].(map[string]any), md0[1].(map[string]any), md0[3].(map[string]any)
	d0New := map[string]any{"wwn": "eui.00000000000000000000000000000abc", "serial": "NEW0", "model": "SAMSUNG MZWLR3T8HCLS-00A07", "sizeBytes": 3840755982336, "slot": "nvme0"}
	d1Moved := invNorm(t, d1).(map[string]any)
	d1Moved["slot"] = "nvme7"
	m["disks"] = []any{d0New, d1Moved, md0[2]} // nvme0 swapped, nvme1 moved to nvme7, nvme3 left
	drv := m["drivers"].(map[string]any)
	drv["nvidia"] = "560.35.03"
	delete(drv, "cuda")
	drv["mlx5_core"] = "24.07"
	mID := str(invStore(t, e, cred, nodeID, m)["id"])

	layout := func(g map[string]any) map[string]any {
		l := map[string]any{"migMode": g["migMode"], "migDevices": []any{}}
		if d, ok := g["migDevices"]; ok {
			l["migDevices"] = d
		}
		return l
	}
	want := []invChange{
		{Type: "gpu.missing", DeviceID: str(gMissing1["uuid"]), Before: gMissing1, After: nil},
		{Type: "gpu.missing", DeviceID: str(gMissing2["uuid"]), Before: gMissing2, After: nil},
		{Type: "gpu.added", DeviceID: str(gNew2["uuid"]), Before: nil, After: gNew2},
		{Type: "gpu.added", DeviceID: str(gNew1["uuid"]), Before: nil, After: gNew1},
		{Type: "disk.replaced", DeviceID: str(d0New["wwn"]), Before: d0, After: d0New},
		{Type: "disk.replaced", DeviceID: str(d1["wwn"]), Before: d1, After: nil},
		{Type: "disk.replaced", DeviceID: str(d1["wwn"]), Before: nil, After: d1Moved},
		{Type: "disk.replaced", DeviceID: str(d3["wwn"]), Before: d3, After: nil},
		{Type: "driver.changed", DeviceID: "cuda", Before: "12.4", After: nil},
		{Type: "driver.changed", DeviceID: "mlx5_core", Before: nil, After: "24.07"},
		{Type: "driver.changed", DeviceID: "nvidia", Before: "550.90.07", After: "560.35.03"},
		{Type: "mig.layout.changed", DeviceID: str(g2["uuid"]), Before: layout(g2Before), After: layout(g2)},
		{Type: "mig.layout.changed", DeviceID: str(g5["uuid"]), Before: layout(g5Before), After: layout(g5)},
	}
	// The expected order is by type, then device id (then slot).
	sortedWant := append([]invChange{}, want...)
	rank := map[string]int{"gpu.missing": 0, "gpu.added": 1, "disk.replaced": 2, "driver.changed": 3, "mig.layout.changed": 4}
	sort.SliceStable(sortedWant, func(i, j int) bool {
		if rank[sortedWant[i].Type] != rank[sortedWant[j].Type] {
			return rank[sortedWant[i].Type] < rank[sortedWant[j].Type]
		}
		return sortedWant[i].DeviceID < sortedWant[j].DeviceID
	})
	got := invDiff(t, e, viewer, "acme", nodeID, baseID, mID, baseID, mID)
	wantTypes := []string{"gpu.missing", "gpu.missing", "gpu.added", "gpu.added", "disk.replaced", "disk.replaced", "disk.replaced", "disk.replaced",
		"driver.changed", "driver.changed", "driver.changed", "mig.layout.changed", "mig.layout.changed"}
	var gotTypes []string
	for _, c := range got {
		gotTypes = append(gotTypes, c.Type)
	}
	if !reflect.DeepEqual(gotTypes, wantTypes) {
		t.Fatalf("change types: %v\nwant %v", gotTypes, wantTypes)
	}
	invWantChanges(t, got, sortedWant...)
	// Every change type is one the contract names.
	for _, c := range got {
		if _, ok := rank[c.Type]; !ok {
			t.Fatalf("unknown change type %q", c.Type)
		}
	}
	// The reverse diff mirrors it.
	rev := invDiff(t, e, viewer, "acme", nodeID, mID, baseID, mID, baseID)
	if len(rev) != len(want) {
		t.Fatalf("reverse diff: %v", invTypes(rev))
	}
	for i := 1; i < len(rev); i++ {
		if rank[rev[i-1].Type] > rank[rev[i].Type] || rank[rev[i-1].Type] == rank[rev[i].Type] && rev[i-1].DeviceID > rev[i].DeviceID {
			t.Fatalf("reverse diff out of order: %v", invTypes(rev))
		}
	}
}

func invList(v any) []any { l, _ := v.([]any); return l }

func TestInventoryCrossTenantIsolation(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")
	gAdmin, gMember, gViewer := e.Tenant("globex")
	iAdmin, _, _ := e.Tenant("initech")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)
	gPool := e.Pool(gAdmin, "globex", "gpu-g")
	gNode, gCred := e.Node(gAdmin, "globex", gPool)

	s1 := invStore(t, e, cred, nodeID, h100(t))
	v2 := h100(t)
	v2["drivers"].(map[string]any)["nvidia"] = "560.35.03"
	s2 := invStore(t, e, cred, nodeID, v2)
	g1 := invStore(t, e, gCred, gNode, h100(t))

	// The pool is offered to globex: offered tenants still do not see nodes.
	e.Must(e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "globex", "quota": map[string]any{"gpus": 8, "instances": 1}}))

	id1, id2, h1 := str(s1["id"]), str(s2["id"]), str(s1["hash"])
	calls := []struct {
		method string
		extra  map[string]any
	}{
		{"inventory/get", nil},
		{"inventory/history", nil},
		{"inventory/history", map[string]any{"limit": 1, "cursor": id2}},
		{"inventory/diff", nil},
		{"inventory/diff", map[string]any{"from": id1, "to": id2}},
		{"inventory/diff", map[string]any{"from": h1}},
		{"inventory/diff", map[string]any{"to": id1}},
	}
	body := func(tenantID, node string, extra map[string]any) map[string]any {
		b := invNode(tenantID, node)
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	unknown := "node_01jd0000000000000000000000"
	for _, c := range calls {
		// The offered tenant, with every role, naming itself: NOT_FOUND,
		// saying no more than for a node that does not exist.
		for _, tok := range []string{gAdmin, gMember, gViewer} {
			r := e.Call(tok, c.method, body("globex", nodeID, c.extra))
			expect(t, r, "NOT_FOUND", anyPath)
			u := e.Call(tok, c.method, body("globex", unknown, c.extra))
			expect(t, u, "NOT_FOUND", anyPath)
			msg := func(r testkit.Resp) string {
				return strings.ReplaceAll(str(obj(t, r.Body, "error")["message"]), nodeID, unknown)
			}
			if msg(r) != msg(u) || fmt.Sprint(obj(t, r.Body, "error")["details"]) != fmt.Sprint(obj(t, u.Body, "error")["details"]) {
				t.Fatalf("%s: another tenant's node answers differently from an unknown one:\n%s\n%s", c.method, r.Raw, u.Raw)
			}
			// Naming the owner without a role there: PERMISSION_DENIED.
			expect(t, e.Call(tok, c.method, body("acme", nodeID, c.extra)), "PERMISSION_DENIED", anyPath)
		}
		// A tenant with no relation at all.
		expect(t, e.Call(iAdmin, c.method, body("initech", nodeID, c.extra)), "NOT_FOUND", anyPath)
		// The other way round: acme does not see globex's node.
		expect(t, e.Call(viewer, c.method, body("acme", gNode, c.extra)), "NOT_FOUND", anyPath)
		// The owner does.
		expect(t, e.Call(viewer, c.method, body("acme", nodeID, c.extra)), "", "")
	}
	// globex's own snapshot ids do not open acme's node, nor the reverse.
	expect(t, e.Call(gAdmin, "inventory/diff", invDiffBody("globex", gNode, id1, "")), "NOT_FOUND", anyPath)
	expect(t, e.Call(admin, "inventory/diff", invDiffBody("acme", nodeID, str(g1["id"]), "")), "NOT_FOUND", anyPath)
	// History of globex's node shows only its own snapshot.
	r := e.Must(e.Call(gViewer, "inventory/history", invNode("globex", gNode)))
	if it := items(t, r); len(it) != 1 || it[0]["id"] != g1["id"] {
		t.Fatalf("globex history: %s", r.Raw)
	}
	// Node credentials stay on their own node.
	expect(t, e.Call(gCred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": h100(t)}), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(gCred, "inventory/get", invNode("acme", nodeID)), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(gCred, "inventory/get", invNode("globex", gNode)), "PERMISSION_DENIED", anyPath)
	if n := invSnapshotCount(t, e, nodeID); n != 2 {
		t.Fatalf("acme's node has %d snapshots, want 2", n)
	}
}

// The history keeps a node's inventory.MaxHistory newest snapshots: a
// probe's node alternating two different reports stored one each time,
// 3.7 MB/s kept forever. At the bound nothing is dropped; one more drops
// the oldest; the latest, get and diff read on, and the dropped snapshot
// is no cursor and no diff end any more.
func TestInventoryHistoryKeepsTheNewest(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)
	var ids []string
	count := func() int {
		var n int
		if err := e.DB.Get(&n, `SELECT count(*) FROM inventory_snapshots WHERE node_id = $1`, nodeID); err != nil {
			t.Fatal(err)
		}
		return n
	}
	report := func(i int) {
		s := h100(t)
		s["firmware"].(map[string]any)["bmc"] = fmt.Sprintf("7.%d.00", i)
		ids = append(ids, str(invStore(t, e, cred, nodeID, s)["id"]))
	}
	for i := range inventory.MaxHistory {
		report(i)
	}
	if n := count(); n != inventory.MaxHistory {
		t.Fatalf("%d snapshots at the bound", n)
	}
	report(inventory.MaxHistory)
	report(inventory.MaxHistory + 1)
	if n := count(); n != inventory.MaxHistory {
		t.Fatalf("%d snapshots past the bound", n)
	}
	var oldest string
	if err := e.DB.Get(&oldest, `SELECT min(snapshot_id) FROM inventory_snapshots WHERE node_id = $1`, nodeID); err != nil || oldest != ids[2] {
		t.Fatalf("oldest kept %s, want %s (%v)", oldest, ids[2], err)
	}
	if got := e.Must(e.Call(viewer, "inventory/get", invNode("acme", nodeID))); got.Body["id"] != ids[len(ids)-1] {
		t.Fatalf("get: %s", got.Raw)
	}
	d := e.Must(e.Call(viewer, "inventory/diff", invNode("acme", nodeID)))
	if d.Body["from"] != ids[len(ids)-2] || d.Body["to"] != ids[len(ids)-1] {
		t.Fatalf("diff: %s", d.Raw)
	}
	expect(t, e.Call(viewer, "inventory/diff", invDiffBody("acme", nodeID, ids[1], "")), "NOT_FOUND", anyPath)
	expect(t, e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": nodeID, "cursor": ids[1]}), "INVALID_INPUT", "cursor")
	last := e.Must(e.Call(viewer, "inventory/history", map[string]any{"tenantId": "acme", "nodeId": nodeID, "cursor": ids[3]}))
	if got := items(t, last); len(got) != 1 || got[0]["id"] != ids[2] || last.Body["cursor"] != nil {
		t.Fatalf("the last page: %s", last.Raw)
	}
}
