package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

var builtinProfileIDs = []string{"rocky-9-base", "ubuntu-24.04-gpu-nvidia", "ubuntu-24.04-mig-inference"}

// profileDoc is a valid profile document (the contract's example shape).
func profileDoc(id string, version int) map[string]any {
	return map[string]any{
		"id": id, "version": version,
		"name": "Ubuntu 24.04 with CUDA", "description": "test profile",
		"image":   map[string]any{"url": "https://images.example/noble.raw.zst", "sha256": strings.Repeat("ab", 32), "format": "raw"},
		"drivers": []any{map[string]any{"name": "nvidia", "version": "570.86.15"}},
		"steps": []any{
			map[string]any{"name": "wipe", "use": "disk.wipe", "with": map[string]any{"devices": []any{"/dev/nvme0n1"}}},
			map[string]any{"use": "os.install"},
			map[string]any{"use": "drivers.install"},
		},
		"userData":   "#cloud-config\n",
		"hostConfig": map[string]any{"hostname": "{{ node.name }}", "kernelArgs": []any{"iommu=pt"}, "sysctl": map[string]any{}},
	}
}

func createProfile(t testing.TB, e *testkit.Env, token, tenantID string, doc map[string]any, visibility string) testkit.Resp {
	t.Helper()
	in := map[string]any{"tenantId": tenantID, "document": doc}
	if visibility != "" {
		in["visibility"] = visibility
	}
	return env(t, e).Call(token, "profiles/create", in)
}

// expectState asserts INVALID_STATE (422), which statusOf does not list.
func expectState(t testing.TB, r testkit.Resp) {
	t.Helper()
	if r.Status != http.StatusUnprocessableEntity || r.Code() != "INVALID_STATE" {
		t.Fatalf("want 422 INVALID_STATE, got %d %q: %s", r.Status, r.Code(), r.Raw)
	}
}

func num(v any) int { f, _ := v.(float64); return int(f) }

func TestProfilesCreateAndGet(t *testing.T) {
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")

	r := must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""))
	if r.Str("tenantId") != "acme" || r.Str("profileId") != "gpu-node" || num(r.Body["profileVersion"]) != 1 ||
		r.Str("visibility") != "private" || num(r.Body["rowVersion"]) != 1 || r.Body["used"] != false ||
		r.Str("createdAt") == "" || r.Str("updatedAt") == "" || obj(t, r.Body, "document")["id"] != "gpu-node" {
		t.Fatalf("profiles.create output: %s", r.Raw)
	}
	// CONFLICT on the same id and version.
	expect(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""), "CONFLICT", anyPath)
	// viewer cannot create.
	expect(t, createProfile(t, e, acme.Viewer.Token, "acme", profileDoc("viewer-made", 1), ""), "PERMISSION_DENIED", anyPath)
	// the builtin tenant is read-only.
	expect(t, createProfile(t, e, e.Operator, "builtin", profileDoc("op-made", 1), ""), "PERMISSION_DENIED", anyPath)

	id128 := "a" + strings.Repeat("b", 126) + "c"
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc(id128, 1), "public"))
	expect(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc(id128+"d", 1), ""), "INVALID_INPUT", "document.id")
	must(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": id128}))
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": id128 + "d"}), "INVALID_INPUT", "profileId")

	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("versions", 1), ""))
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("versions", 1000000), ""))
	expect(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("versions", 0), ""), "INVALID_INPUT", "document.version")
	expect(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("versions", 1000001), ""), "INVALID_INPUT", "document.version")
	for _, v := range []int{0, 1000001} {
		expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "versions", "profileVersion": v}), "INVALID_INPUT", "profileVersion")
	}

	// Each structural rule names the first offending field.
	mod := func(f func(d map[string]any)) map[string]any { d := profileDoc(uniq("bad"), 1); f(d); return d }
	steps := func(d map[string]any) []any { return d["steps"].([]any) }
	manySteps := make([]any, 201)
	for i := range manySteps {
		manySteps[i] = map[string]any{"name": fmt.Sprintf("s%d", i), "use": "bmc.power", "with": map[string]any{"action": "on"}}
	}
	cases := []struct {
		name string
		doc  any
		path string
	}{
		{"missing id", mod(func(d map[string]any) { delete(d, "id") }), "document.id"},
		{"missing version", mod(func(d map[string]any) { delete(d, "version") }), "document.version"},
		{"id uppercase", mod(func(d map[string]any) { d["id"] = "GPU" }), "document.id"},
		{"id trailing dash", mod(func(d map[string]any) { d["id"] = "gpu-" }), "document.id"},
		{"version string", mod(func(d map[string]any) { d["version"] = "1" }), "document.version"},
		{"version fraction", mod(func(d map[string]any) { d["version"] = 1.5 }), "document.version"},
		{"unknown field", mod(func(d map[string]any) { d["bogus"] = 1 }), "document.bogus"},
		{"name too long", mod(func(d map[string]any) { d["name"] = strings.Repeat("x", 201) }), "document.name"},
		{"NUL in description", mod(func(d map[string]any) { d["description"] = "a\x00b" }), "document.description"},
		{"image sha256", mod(func(d map[string]any) { d["image"].(map[string]any)["sha256"] = "nope" }), "document.image.sha256"},
		{"image url missing", mod(func(d map[string]any) { delete(d["image"].(map[string]any), "url") }), "document.image.url"},
		{"driver name missing", mod(func(d map[string]any) { delete(d["drivers"].([]any)[0].(map[string]any), "name") }), "document.drivers[0].name"},
		{"step use missing", mod(func(d map[string]any) { delete(steps(d)[2].(map[string]any), "use") }), "document.steps[2].use"},
		{"step use not a string", mod(func(d map[string]any) { steps(d)[1].(map[string]any)["use"] = 7 }), "document.steps[1].use"},
		{"step with not an object", mod(func(d map[string]any) { steps(d)[0].(map[string]any)["with"] = "x" }), "document.steps[0].with"},
		{"step unknown field", mod(func(d map[string]any) { steps(d)[1].(map[string]any)["run"] = "x" }), "document.steps[1].run"},
		{"first of two problems", mod(func(d map[string]any) {
			delete(steps(d)[2].(map[string]any), "use")
			steps(d)[1].(map[string]any)["use"] = 7
		}), "document.steps[1].use"},
		{"201 steps", mod(func(d map[string]any) { d["steps"] = manySteps }), "document.steps"},
		{"userData over 64 KiB", mod(func(d map[string]any) { d["userData"] = strings.Repeat("x", 64<<10+1) }), "document.userData"},
		{"userData multibyte over 64 KiB", mod(func(d map[string]any) { d["userData"] = strings.Repeat("é", 32<<10+1) }), "document.userData"},
		{"hostConfig kernelArgs", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["kernelArgs"] = []any{"ok", strings.Repeat("k", 257)}
		}), "document.hostConfig.kernelArgs[1]"},
		{"hostConfig kernelArgs with a line break", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["kernelArgs"] = []any{"ok", "quiet\ninit=/bin/sh"}
		}), "document.hostConfig.kernelArgs[1]"},
		{"hostConfig kernelArgs with a line separator", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["kernelArgs"] = []any{"a\u2028init=/bin/sh"}
		}), "document.hostConfig.kernelArgs[0]"},
		{"hostConfig hostname with NEL", mod(func(d map[string]any) { d["hostConfig"].(map[string]any)["hostname"] = "a\u0085b" }), "document.hostConfig.hostname"},
		{"hostConfig sysctl value with a C1 control", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["sysctl"] = map[string]any{"vm.swappiness": "1\u009b"}
		}), "document.hostConfig.sysctl.vm.swappiness"},
		{"hostConfig sysctl key with a line separator", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["sysctl"] = map[string]any{"a\u2029b": 1}
		}), "document.hostConfig.sysctl.a\u2029b"},
		{"hostConfig sysctl key over 256", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["sysctl"] = map[string]any{"vm.swappiness": 1, strings.Repeat("k", 257): 1}
		}), "document.hostConfig.sysctl." + strings.Repeat("k", 64) + "…"},
		{"hostConfig sysctl key with a line break", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["sysctl"] = map[string]any{"a\nkernel.x": 1}
		}), "document.hostConfig.sysctl.a\nkernel.x"},
		{"hostConfig sysctl key with =", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["sysctl"] = map[string]any{"a=b": 1}
		}), "document.hostConfig.sysctl.a=b"},
		{"hostConfig sysctl value with a line break", mod(func(d map[string]any) {
			d["hostConfig"].(map[string]any)["sysctl"] = map[string]any{"vm.swappiness": "1\nkernel.x = y"}
		}), "document.hostConfig.sysctl.vm.swappiness"},
		{"document not an object", []any{1}, "document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env(t, e).Call(acme.Member.Token, "profiles/create", map[string]any{"tenantId": "acme", "document": c.doc})
			expect(t, r, "INVALID_INPUT", c.path)
		})
	}
	expect(t, env(t, e).Call(acme.Member.Token, "profiles/create", map[string]any{"tenantId": "acme"}), "INVALID_INPUT", "document")
	expect(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("vis", 1), "shared"), "INVALID_INPUT", "visibility")
	// Exactly 200 steps and 64 KiB of userData pass.
	d := profileDoc("limits", 1)
	d["steps"] = manySteps[:200]
	d["userData"] = strings.Repeat("x", 64<<10)
	// sysctl keys of 256 characters, globs and sysctl.d's "-" prefix, and
	// a value with spaces and a tab pass.
	d["hostConfig"] = map[string]any{"sysctl": map[string]any{strings.Repeat("k", 256): 1, "-net.ipv4.conf.*.rp_filter": "2",
		"net.ipv4.ip_local_port_range": "32768 60999", "kernel.x": "a\tb"}}
	must(t, createProfile(t, e, acme.Member.Token, "acme", d, ""))

	// get: latest when profileVersion is omitted; NOT_FOUND otherwise.
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 2), ""))
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}))
	if num(r.Body["profileVersion"]) != 2 {
		t.Fatalf("latest: %s", r.Raw)
	}
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 1}))
	if num(r.Body["profileVersion"]) != 1 {
		t.Fatalf("version 1: %s", r.Raw)
	}
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 3}), "NOT_FOUND", "")
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "nothing"}), "NOT_FOUND", "")

	// Cross-tenant isolation: a private profile is invisible to another tenant.
	globex := newTenant(t, e, "globex")
	for _, m := range []string{"get", "validate", "render"} {
		expect(t, env(t, e).Call(globex.Admin.Token, "profiles/"+m, map[string]any{"tenantId": "globex", "profileId": "gpu-node"}), "NOT_FOUND", "")
	}
	expect(t, env(t, e).Call(globex.Admin.Token, "profiles/update", map[string]any{"tenantId": "globex", "profileId": "gpu-node", "profileVersion": 1, "visibility": "public"}), "NOT_FOUND", "")
	expect(t, env(t, e).Call(globex.Admin.Token, "profiles/delete", map[string]any{"tenantId": "globex", "profileId": "gpu-node"}), "NOT_FOUND", "")
	// Naming the other tenant is PERMISSION_DENIED.
	expect(t, env(t, e).Call(globex.Admin.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}), "PERMISSION_DENIED", anyPath)

	// Lookup order: own, then public stored, then builtin.
	r = must(t, env(t, e).Call(globex.Viewer.Token, "profiles/get", map[string]any{"tenantId": "globex", "profileId": id128}))
	if r.Str("tenantId") != "acme" || r.Str("visibility") != "public" {
		t.Fatalf("public lookup: %s", r.Raw)
	}
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("shared", 5), "public"))
	must(t, createProfile(t, e, globex.Member.Token, "globex", profileDoc("shared", 1), ""))
	r = must(t, env(t, e).Call(globex.Viewer.Token, "profiles/get", map[string]any{"tenantId": "globex", "profileId": "shared"}))
	if r.Str("tenantId") != "globex" || num(r.Body["profileVersion"]) != 1 {
		t.Fatalf("own profile must win: %s", r.Raw)
	}
	r = must(t, env(t, e).Call(globex.Viewer.Token, "profiles/get", map[string]any{"tenantId": "globex", "profileId": "shared", "profileVersion": 5}))
	if r.Str("tenantId") != "acme" {
		t.Fatalf("public version: %s", r.Raw)
	}
	// writing a public profile of another tenant: NOT_FOUND
	expect(t, env(t, e).Call(globex.Admin.Token, "profiles/update", map[string]any{"tenantId": "globex", "profileId": "shared", "profileVersion": 5, "visibility": "private"}), "NOT_FOUND", "")
	expect(t, env(t, e).Call(globex.Admin.Token, "profiles/delete", map[string]any{"tenantId": "globex", "profileId": "shared", "profileVersion": 5}), "NOT_FOUND", "")
	for _, id := range builtinProfileIDs {
		r = must(t, env(t, e).Call(globex.Viewer.Token, "profiles/get", map[string]any{"tenantId": "globex", "profileId": id}))
		if r.Str("tenantId") != "builtin" || r.Str("profileId") != id || r.Body["used"] != false {
			t.Fatalf("builtin %s: %s", id, r.Raw)
		}
	}
	must(t, createProfile(t, e, globex.Member.Token, "globex", profileDoc("rocky-9-base", 1), ""))
	r = must(t, env(t, e).Call(globex.Viewer.Token, "profiles/get", map[string]any{"tenantId": "globex", "profileId": "rocky-9-base"}))
	if r.Str("tenantId") != "globex" {
		t.Fatalf("own profile must shadow builtin: %s", r.Raw)
	}
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "rocky-9-base"}))
	if r.Str("tenantId") != "builtin" {
		t.Fatalf("another tenant's private profile must not shadow builtin: %s", r.Raw)
	}
}

func issueCodes(t testing.TB, list []any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, x := range list {
		is := x.(map[string]any)
		if str(is["message"]) == "" {
			t.Fatalf("issue without message: %v", is)
		}
		out[str(is["path"])] = str(is["code"])
	}
	return out
}

func TestProfilesValidateAndRender(t *testing.T) {
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")

	// Every builtin profile validates and renders.
	for _, id := range builtinProfileIDs {
		r := must(t, env(t, e).Call(acme.Viewer.Token, "profiles/validate", map[string]any{"tenantId": "acme", "profileId": id}))
		if r.Body["valid"] != true || len(r.Body["issues"].([]any)) != 0 {
			t.Fatalf("builtin %s: %s", id, r.Raw)
		}
		r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/render", map[string]any{"tenantId": "acme", "profileId": id, "profileVersion": 1}))
		if obj(t, r.Body, "profile")["tenantId"] != "builtin" || len(r.Body["steps"].([]any)) < 5 {
			t.Fatalf("builtin %s render: %s", id, r.Raw)
		}
	}
	r := must(t, env(t, e).Call(acme.Viewer.Token, "profiles/render", map[string]any{"tenantId": "acme", "profileId": "ubuntu-24.04-mig-inference"}))
	var uses []string
	for _, x := range r.Body["steps"].([]any) {
		uses = append(uses, str(x.(map[string]any)["use"]))
	}
	if !strings.Contains(strings.Join(uses, ","), "drivers.install,drivers.install,mig.configure") {
		t.Fatalf("mig render: %v", uses)
	}

	// The contract's example renders into its phases.
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""))
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/render", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}))
	if obj(t, r.Body, "profile")["profileId"] != "gpu-node" {
		t.Fatalf("render profile: %s", r.Raw)
	}
	want := [][3]string{
		{"wipe", "disk.wipe", "prepare"},
		{"os.install/disk.partition", "disk.partition", "prepare"},
		{"os.install/image.write", "image.write", "install"},
		{"os.install/bootloader.install", "bootloader.install", "install"},
		{"drivers.install/nvidia", "drivers.install", "configure"},
	}
	got := r.Body["steps"].([]any)
	if len(got) != len(want) {
		t.Fatalf("render steps: %s", r.Raw)
	}
	for i, w := range want {
		s := got[i].(map[string]any)
		if num(s["index"]) != i || s["name"] != w[0] || s["use"] != w[1] || s["phase"] != w[2] {
			t.Fatalf("step %d: want %v, got %v", i, w, s)
		}
	}
	img := got[2].(map[string]any)["with"].(map[string]any)
	if img["sha256"] != strings.Repeat("ab", 32) || img["verify"] != true || img["url"] != "https://images.example/noble.raw.zst" {
		t.Fatalf("image.write with: %v", img)
	}
	drv := got[4].(map[string]any)["with"].(map[string]any)
	if drv["name"] != "nvidia" || drv["version"] != "570.86.15" {
		t.Fatalf("drivers.install with: %v", drv)
	}

	// A profile with every kind of problem: all issues are reported.
	d := profileDoc("broken", 1)
	delete(d, "drivers")
	d["steps"] = []any{
		map[string]any{"name": "nuke", "use": "disk.nuke"},                                              // unknown use
		map[string]any{"name": "wipe", "use": "disk.wipe"},                                              // with.devices required
		map[string]any{"name": "wipe2", "use": "disk.wipe", "with": map[string]any{"devices": []any{}}}, // empty devices
		map[string]any{"name": "wipe3", "use": "disk.wipe", "with": map[string]any{"devices": []any{"sda"}}},
		map[string]any{"use": "drivers.install"},                                                    // no drivers: expands to nothing
		map[string]any{"name": "power", "use": "bmc.power", "with": map[string]any{"action": "on"}}, // finalize
		map[string]any{"name": "power", "use": "cloud-init.write"},                                  // duplicate name, and configure after finalize
	}
	must(t, createProfile(t, e, acme.Member.Token, "acme", d, ""))
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/validate", map[string]any{"tenantId": "acme", "profileId": "broken"}))
	if r.Body["valid"] != false {
		t.Fatalf("validate: %s", r.Raw)
	}
	codes := issueCodes(t, r.Body["issues"].([]any))
	wantIssues := map[string]string{
		"document.steps[0].use":             "UNKNOWN_STEP",
		"document.steps[1].with.devices":    "INVALID_WITH",
		"document.steps[2].with.devices":    "INVALID_WITH",
		"document.steps[3].with.devices[0]": "INVALID_WITH",
		"document.steps[4].use":             "EMPTY_EXPANSION",
		"document.steps[6].name":            "DUPLICATE_NAME",
		"document.steps[6]":                 "PHASE_ORDER",
	}
	for p, c := range wantIssues {
		if codes[p] != c {
			t.Errorf("issue at %s: want %s, got %q (all: %v)", p, c, codes[p], codes)
		}
	}
	if len(codes) != len(wantIssues) {
		t.Errorf("issues: want %d, got %v", len(wantIssues), codes)
	}
	r = env(t, e).Call(acme.Viewer.Token, "profiles/render", map[string]any{"tenantId": "acme", "profileId": "broken"})
	expect(t, r, "INVALID_INPUT", anyPath)
	if is, _ := obj(t, r.Body, "error", "details")["issues"].([]any); len(is) != len(wantIssues) {
		t.Fatalf("render details.issues: %s", r.Raw)
	}

	for _, m := range []string{"validate", "render"} {
		expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/"+m, map[string]any{"tenantId": "acme", "profileId": "unknown"}), "NOT_FOUND", "")
		expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/"+m, map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 2}), "NOT_FOUND", "")
	}
}

func TestProfilesUpdateAndDelete(t *testing.T) {
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""))
	upd := func(token string, in map[string]any) testkit.Resp {
		in["tenantId"], in["profileId"] = "acme", "gpu-node"
		if _, ok := in["profileVersion"]; !ok {
			in["profileVersion"] = 1
		}
		return env(t, e).Call(token, "profiles/update", in)
	}

	expect(t, upd(acme.Member.Token, map[string]any{}), "INVALID_INPUT", "document")
	expect(t, env(t, e).Call(acme.Member.Token, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}), "INVALID_INPUT", "profileVersion")
	expect(t, upd(acme.Member.Token, map[string]any{"document": profileDoc("other", 1)}), "INVALID_INPUT", "document.id")
	expect(t, upd(acme.Member.Token, map[string]any{"document": profileDoc("gpu-node", 2)}), "INVALID_INPUT", "document.version")
	bad := profileDoc("gpu-node", 1)
	delete(bad["steps"].([]any)[2].(map[string]any), "use")
	expect(t, upd(acme.Member.Token, map[string]any{"document": bad}), "INVALID_INPUT", "document.steps[2].use")
	expect(t, upd(acme.Member.Token, map[string]any{"document": "text"}), "INVALID_INPUT", "document")
	expect(t, upd(acme.Member.Token, map[string]any{"visibility": "everyone"}), "INVALID_INPUT", "visibility")
	expect(t, upd(acme.Member.Token, map[string]any{"visibility": "public", "expectedVersion": 0}), "INVALID_INPUT", "expectedVersion")
	expect(t, upd(acme.Viewer.Token, map[string]any{"visibility": "public"}), "PERMISSION_DENIED", anyPath)
	expect(t, upd(acme.Member.Token, map[string]any{"visibility": "public", "profileVersion": 2}), "NOT_FOUND", "")

	// expectedVersion is compared with rowVersion.
	expect(t, upd(acme.Member.Token, map[string]any{"visibility": "public", "expectedVersion": 2}), "CONFLICT", anyPath)
	r := must(t, upd(acme.Member.Token, map[string]any{"visibility": "public", "expectedVersion": 1}))
	if r.Str("visibility") != "public" || num(r.Body["rowVersion"]) != 2 {
		t.Fatalf("update visibility: %s", r.Raw)
	}
	nd := profileDoc("gpu-node", 1)
	nd["name"] = "renamed"
	r = must(t, upd(acme.Member.Token, map[string]any{"document": nd}))
	if num(r.Body["rowVersion"]) != 3 || obj(t, r.Body, "document")["name"] != "renamed" || r.Str("visibility") != "public" {
		t.Fatalf("update document: %s", r.Raw)
	}

	// A used version keeps its document but can change visibility.
	if _, err := e.DB.ExecContext(context.Background(), `UPDATE profiles SET used = true WHERE tenant_id = 'acme' AND profile_id = 'gpu-node' AND profile_version = 1`); err != nil {
		t.Fatal(err)
	}
	nd["name"] = "again"
	expectState(t, upd(acme.Member.Token, map[string]any{"document": nd}))
	expectState(t, upd(acme.Member.Token, map[string]any{"document": nd, "visibility": "private"}))
	r = must(t, upd(acme.Member.Token, map[string]any{"visibility": "private", "expectedVersion": 3}))
	if r.Str("visibility") != "private" || r.Body["used"] != true || num(r.Body["rowVersion"]) != 4 || obj(t, r.Body, "document")["name"] != "renamed" {
		t.Fatalf("used update visibility: %s", r.Raw)
	}

	// builtin profiles are read-only and not stored.
	expect(t, env(t, e).Call(acme.Member.Token, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "rocky-9-base", "profileVersion": 1, "visibility": "private"}), "NOT_FOUND", "")
	expect(t, env(t, e).Call(acme.Member.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "rocky-9-base"}), "NOT_FOUND", "")
	expect(t, env(t, e).Call(acme.Member.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "rocky-9-base", "profileVersion": 1}), "NOT_FOUND", "")
	expect(t, env(t, e).Call(e.Operator, "profiles/delete", map[string]any{"tenantId": "builtin", "profileId": "rocky-9-base"}), "PERMISSION_DENIED", anyPath)

	// delete hides one version, or every version.
	for v := 2; v <= 4; v++ {
		must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", v), ""))
	}
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 4}), "PERMISSION_DENIED", anyPath)
	r = must(t, env(t, e).Call(acme.Member.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 4}))
	if num(r.Body["deleted"]) != 1 {
		t.Fatalf("delete one: %s", r.Raw)
	}
	for _, m := range []string{"get", "validate", "render"} {
		expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/"+m, map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 4}), "NOT_FOUND", "")
	}
	expect(t, upd(acme.Member.Token, map[string]any{"visibility": "public", "profileVersion": 4}), "NOT_FOUND", "")
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}))
	if num(r.Body["profileVersion"]) != 3 {
		t.Fatalf("latest after delete: %s", r.Raw)
	}
	expect(t, env(t, e).Call(acme.Member.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 4}), "NOT_FOUND", "")
	r = must(t, env(t, e).Call(acme.Member.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}))
	if num(r.Body["deleted"]) != 3 {
		t.Fatalf("delete all: %s", r.Raw)
	}
	expect(t, env(t, e).Call(acme.Member.Token, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}), "NOT_FOUND", "")
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}), "NOT_FOUND", "")
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme"}))
	for _, it := range items(t, r) {
		if it["profileId"] == "gpu-node" {
			t.Fatalf("hidden profile listed: %s", r.Raw)
		}
	}
	// A hidden version still exists: version 1, which a workflow used,
	// cannot be created again with another document; the next one can.
	expect(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""), "CONFLICT", "document.version")
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 1}), "NOT_FOUND", "")
	r = must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 5), ""))
	if r.Body["used"] != false || r.Str("visibility") != "private" {
		t.Fatalf("the next version: %s", r.Raw)
	}
}

type profKey struct {
	Tenant, ID string
	Version    int
}

func profKeys(list []map[string]any) []profKey {
	out := make([]profKey, len(list))
	for i, it := range list {
		out[i] = profKey{str(it["tenantId"]), str(it["profileId"]), num(it["profileVersion"])}
	}
	return out
}

func listAll(t testing.TB, e *testkit.Env, token, tenantID string, limit int) ([]profKey, int) {
	t.Helper()
	var out []profKey
	cursor, pages := "", 0
	for {
		in := map[string]any{"tenantId": tenantID, "limit": limit}
		if cursor != "" {
			in["cursor"] = cursor
		}
		r := must(t, env(t, e).Call(token, "profiles/list", in))
		out = append(out, profKeys(items(t, r))...)
		pages++
		c, _ := r.Body["cursor"].(string)
		if c == "" {
			return out, pages
		}
		if len(c) > 256 {
			t.Fatalf("cursor of %d characters: %s", len(c), c)
		}
		cursor = c
		if pages > 1000 {
			t.Fatal("pagination does not end")
		}
	}
}

func TestProfilesList(t *testing.T) {
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	globex := newTenant(t, e, "globex")
	long := strings.Repeat("t", 128)
	must(t, env(t, e).Call(e.Operator, "tenants/create", map[string]any{"tenantId": long, "name": "Long"}))
	longAdmin := newToken(t, e, e.Operator, long, "admin", "admin")

	// own rows interleaved with public rows of other tenants and builtins
	// (an id a module ships can only be a tenant's private one, and a
	// public id is one tenant's)
	for _, p := range []struct {
		id string
		v  int
	}{{"a-own", 1}, {"a-own", 2}, {"rocky-8", 1}, {"rocky-9-base", 1}, {"t-own", 1}, {"zz", 1}, {"shared", 1}} {
		must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc(p.id, p.v), ""))
	}
	for _, id := range []string{"b-pub", "u-pub", "shared"} {
		must(t, createProfile(t, e, globex.Member.Token, "globex", profileDoc(id, 1), "public"))
	}
	must(t, createProfile(t, e, globex.Member.Token, "globex", profileDoc("c-priv", 1), ""))
	id128 := "z" + strings.Repeat("y", 126) + "x"
	must(t, createProfile(t, e, longAdmin.Token, long, profileDoc(id128, 1000000), "public"))
	must(t, createProfile(t, e, longAdmin.Token, long, profileDoc("v-pub", 1), "public"))

	want := []profKey{
		{"acme", "a-own", 1}, {"acme", "a-own", 2}, {"globex", "b-pub", 1},
		{"acme", "rocky-8", 1}, {"builtin", "rocky-9-base", 1}, {"acme", "rocky-9-base", 1},
		{"acme", "shared", 1}, {"globex", "shared", 1},
		{"acme", "t-own", 1}, {"globex", "u-pub", 1},
		{"builtin", "ubuntu-24.04-gpu-nvidia", 1}, {"builtin", "ubuntu-24.04-mig-inference", 1},
		{long, "v-pub", 1}, {long, id128, 1000000}, {"acme", "zz", 1},
	}
	sameSet := func(got []profKey) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("list: want %v, got %v", want, got)
		}
		for i := range got {
			if got[i].ID != want[i].ID || got[i].Version != want[i].Version {
				t.Fatalf("order at %d: want %v, got %v", i, want, got)
			}
		}
		a, b := append([]profKey{}, got...), append([]profKey{}, want...)
		less := func(l []profKey) func(i, j int) bool {
			return func(i, j int) bool { return fmt.Sprint(l[i]) < fmt.Sprint(l[j]) }
		}
		sort.Slice(a, less(a))
		sort.Slice(b, less(b))
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("list: want %v, got %v", want, got)
			}
		}
	}
	r := must(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "limit": 200}))
	if r.Body["cursor"] != nil {
		t.Fatalf("single page must end with a null cursor: %s", r.Raw)
	}
	sameSet(profKeys(items(t, r)))
	for _, limit := range []int{1, 2, 3, 4, 7} {
		got, pages := listAll(t, e, acme.Viewer.Token, "acme", limit)
		sameSet(got)
		if pages < len(want)/limit {
			t.Fatalf("limit %d: %d pages", limit, pages)
		}
	}

	// Input rules.
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "limit": 201}), "INVALID_INPUT", "limit")
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "limit": 0}), "INVALID_INPUT", "limit")
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "cursor": strings.Repeat("a", 257)}), "INVALID_INPUT", "cursor")
	expect(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "cursor": "not a cursor!"}), "INVALID_INPUT", "cursor")
	expect(t, env(t, e).Call(globex.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme"}), "PERMISSION_DENIED", anyPath)

	// The cursor stays correct when rows are added before and after it.
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "limit": 6}))
	first := profKeys(items(t, r))
	cursor := str(r.Body["cursor"])
	if len(first) != 6 || cursor == "" || len(cursor) > 256 {
		t.Fatalf("first page: %s", r.Raw)
	}
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("0-early", 1), ""))
	must(t, createProfile(t, e, globex.Member.Token, "globex", profileDoc("rocky-8", 1), "public")) // before the cursor
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("shared", 2), ""))            // after the cursor
	must(t, createProfile(t, e, globex.Member.Token, "globex", profileDoc("a-own", 1), "public"))   // before the cursor
	var rest []profKey
	for cursor != "" {
		r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "limit": 4, "cursor": cursor}))
		rest = append(rest, profKeys(items(t, r))...)
		cursor = str(r.Body["cursor"])
	}
	seen := map[profKey]int{}
	for _, k := range append(append([]profKey{}, first...), rest...) {
		seen[k]++
	}
	for _, k := range want {
		if seen[k] != 1 {
			t.Fatalf("row %v seen %d times across pages (first %v, rest %v)", k, seen[k], first, rest)
		}
	}
	if seen[profKey{"acme", "shared", 2}] != 1 || seen[profKey{"acme", "0-early", 1}] != 0 || seen[profKey{"globex", "a-own", 1}] != 0 {
		t.Fatalf("rows added around the cursor: first %v, rest %v", first, rest)
	}

	// limit defaults to 50.
	for i := 0; i < 50; i++ {
		must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc(fmt.Sprintf("bulk-%02d", i), 1), ""))
	}
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme"}))
	if n := len(items(t, r)); n != 50 || r.Body["cursor"] == nil {
		t.Fatalf("default limit: %d items, cursor %v", n, r.Body["cursor"])
	}
	r = must(t, env(t, e).Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "limit": 200}))
	if n := len(items(t, r)); n != len(want)+4+50 || r.Body["cursor"] != nil {
		t.Fatalf("limit 200: %d items", n)
	}
	// private profiles of other tenants never appear.
	for _, k := range profKeys(items(t, r)) {
		if k.ID == "c-priv" {
			t.Fatal("another tenant's private profile listed")
		}
	}
}

func TestProfilesStepsReadTheDocument(t *testing.T) {
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	d := profileDoc("no-image", 1)
	delete(d, "image")
	delete(d, "userData")
	d["steps"] = []any{map[string]any{"use": "os.install"}, map[string]any{"use": "cloud-init.write"}}
	must(t, createProfile(t, e, acme.Member.Token, "acme", d, ""))
	r := must(t, env(t, e).Call(acme.Viewer.Token, "profiles/validate", map[string]any{"tenantId": "acme", "profileId": "no-image"}))
	codes := issueCodes(t, r.Body["issues"].([]any))
	if r.Body["valid"] != false || codes["document.image"] != "INVALID_WITH" || codes["document.userData"] != "INVALID_WITH" || len(codes) != 2 {
		t.Fatalf("validate: %s", r.Raw)
	}
	r = env(t, e).Call(acme.Viewer.Token, "profiles/render", map[string]any{"tenantId": "acme", "profileId": "no-image"})
	expect(t, r, "INVALID_INPUT", "document.image")
}
