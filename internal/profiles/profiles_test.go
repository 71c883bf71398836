package profiles_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type env struct {
	*fixture.F
	acme, beta fixture.Tenant
}

func newEnv(t *testing.T) *env {
	t.Parallel()
	f := fixture.New(t)
	return &env{F: f, acme: f.Tenant("acme"), beta: f.Tenant("beta")}
}

// doc is a valid profile document; edit changes it before it is encoded.
func doc(id string, version int, edit ...func(d map[string]any)) json.RawMessage {
	d := map[string]any{
		"id": id, "version": version, "name": "Ubuntu",
		"image":   map[string]any{"url": "https://images.example/noble.raw.zst", "sha256": strings.Repeat("ab", 32), "format": "raw"},
		"drivers": []any{map[string]any{"name": "nvidia", "version": "570.86.15"}},
		"steps": []any{
			map[string]any{"name": "wipe", "use": "disk.wipe", "with": map[string]any{"devices": []any{"/dev/nvme0n1"}}},
			map[string]any{"use": "os.install"},
			map[string]any{"use": "drivers.install"},
		},
		"userData": "#cloud-config\n",
	}
	for _, f := range edit {
		f(d)
	}
	b, _ := json.Marshal(d)
	return b
}

func (e *env) create(tenant, id string, version int, visibility string, edit ...func(map[string]any)) *profiles.Profile {
	e.T.Helper()
	in := &profiles.CreateInput{TenantID: tenant, Document: doc(id, version, edit...)}
	if visibility != "" {
		in.Visibility = &visibility
	}
	return fixture.Must(profiles.Create(e.Ctx, e.DB, in))
}

func ref(tenant, id string, version int) *profiles.RefInput {
	in := &profiles.RefInput{TenantID: tenant, ProfileID: id}
	if version > 0 {
		in.ProfileVersion = &version
	}
	return in
}

// Structure is checked at create: INVALID_INPUT naming the first
// offending field.
func TestCreateChecksTheDocument(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name string
		doc  json.RawMessage
		path string
	}{
		{"not an object", json.RawMessage(`[1]`), "document"},
		{"no id", doc("x", 1, func(d map[string]any) { delete(d, "id") }), "document.id"},
		{"a bad id", doc("Bad_ID", 1), "document.id"},
		{"version 0", doc("x", 0), "document.version"},
		{"a version too large", doc("x", profiles.MaxVersion+1), "document.version"},
		{"an unknown field", doc("x", 1, func(d map[string]any) { d["extra"] = true }), "document.extra"},
		{"a step without use", doc("x", 1, func(d map[string]any) {
			d["steps"] = []any{map[string]any{"use": "disk.wipe"}, map[string]any{"use": "os.install"}, map[string]any{"name": "x"}}
		}), "document.steps[2].use"},
		{"a bad image hash", doc("x", 1, func(d map[string]any) { d["image"].(map[string]any)["sha256"] = "nothex" }), "document.image.sha256"},
		{"NUL in user data", doc("x", 1, func(d map[string]any) { d["userData"] = "a\x00b" }), "document.userData"},
		{"user data too large", doc("x", 1, func(d map[string]any) { d["userData"] = strings.Repeat("x", profiles.MaxUserData+1) }), "document.userData"},
	} {
		_, err := profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: c.doc})
		if err == nil {
			t.Fatalf("%s: accepted", c.name)
		}
		e2, _ := errs.As(err)
		if e2 == nil || e2.Code != errs.InvalidInput || e2.Details["path"] != c.path {
			t.Fatalf("%s: want INVALID_INPUT at %s, got %v (details %v)", c.name, c.path, err, e2)
		}
	}
	// A document is at most MaxDocument bytes of compact JSON: at the
	// bound it is stored, one byte past it refused at document.
	sizedWith := func(userData string, version, size int) json.RawMessage {
		pad := func(n int) func(d map[string]any) {
			return func(d map[string]any) {
				d["userData"] = userData
				d["steps"].([]any)[1] = map[string]any{"use": "os.install", "with": map[string]any{"pad": strings.Repeat("p", n)}}
			}
		}
		b := doc("sized", version, pad(0))
		return doc("sized", version, pad(size-len(b)))
	}
	sized := func(version, size int) json.RawMessage {
		return sizedWith(strings.Repeat("x", profiles.MaxUserData), version, size)
	}
	if b := sized(1, profiles.MaxDocument); len(b) != profiles.MaxDocument {
		t.Fatalf("the document at the bound is %d bytes", len(b))
	}
	fixture.Must(profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: sized(1, profiles.MaxDocument)}))
	_, err := profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: sized(2, profiles.MaxDocument+1)})
	fixture.Code(t, err, errs.InvalidInput, "document")
	// One document has one size, however it is spelled: "é" sent as the
	// escape \u00e9 (Python's json.dumps writes that by default) counts
	// as the character, 2 bytes, not the escape's 6.
	accented := strings.Repeat("é", profiles.MaxUserData/2)
	escaped := func(b json.RawMessage) json.RawMessage {
		return json.RawMessage(strings.ReplaceAll(string(b), "é", `\u00e9`))
	}
	fixture.Must(profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: escaped(sizedWith(accented, 3, profiles.MaxDocument))}))
	_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: escaped(sizedWith(accented, 4, profiles.MaxDocument+1))})
	fixture.Code(t, err, errs.InvalidInput, "document")
	// U+2028 and U+2029 are three bytes in UTF-8 too, sent raw or escaped
	// (encoding/json writes both as six-byte escapes whatever it is told,
	// and a document sent raw at the bound was refused as 3 bytes a
	// separator over it).
	separators := strings.Repeat("\u2028\u2029", 1000)
	raw := func(b json.RawMessage) json.RawMessage {
		return json.RawMessage(strings.NewReplacer(`\u2028`, "\u2028", `\u2029`, "\u2029").Replace(string(b)))
	}
	if b := raw(sizedWith(separators, 5, profiles.MaxDocument+6000)); len(b) != profiles.MaxDocument {
		t.Fatalf("the document of separators at the bound is %d bytes", len(b))
	}
	fixture.Must(profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: raw(sizedWith(separators, 5, profiles.MaxDocument+6000))}))
	fixture.Must(profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: sizedWith(separators, 6, profiles.MaxDocument+6000)}))
	_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: raw(sizedWith(separators, 7, profiles.MaxDocument+6001))})
	fixture.Code(t, err, errs.InvalidInput, "document")

	p := e.create("acme", "gpu-base", 1, "")
	if p.Visibility != profiles.Private || p.RowVersion != 1 || p.Used || p.TenantID != "acme" {
		t.Fatalf("created: %+v", p)
	}
	// The same id and version again: CONFLICT, at document.version.
	_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: doc("gpu-base", 1)})
	fixture.Code(t, err, errs.Conflict, "document.version")
	// Another tenant may store the same id and version.
	e.create("beta", "gpu-base", 1, "")
	_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "nosuch", Document: doc("gpu-base", 1)})
	fixture.Code(t, err, errs.NotFound, "")
}

// Lookups see the tenant's own versions, public ones of any tenant and the
// shipped ones, preferring them in that order; a private version of
// another tenant is NOT_FOUND.
func TestLookupPrefersOwnThenPublicThenShipped(t *testing.T) {
	e := newEnv(t)
	e.create("acme", "secret", 1, profiles.Private)
	_, err := profiles.Get(e.Ctx, e.DB, ref("beta", "secret", 0))
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[profiles.Profile](e.F, e.beta.Viewer, "profiles.get", map[string]any{"tenantId": "beta", "profileId": "secret"})
	fixture.Code(t, err, errs.NotFound, "")

	e.create("acme", "shared", 1, profiles.Public)
	e.create("acme", "shared", 2, profiles.Public)
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("beta", "shared", 0))); p.TenantID != "acme" || p.ProfileVersion != 2 {
		t.Fatalf("beta's latest of a public profile: %s v%d", p.TenantID, p.ProfileVersion)
	}
	// beta's own version 1 wins over acme's public versions, even the later one.
	e.create("beta", "shared", 1, profiles.Private)
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("beta", "shared", 0))); p.TenantID != "beta" || p.ProfileVersion != 1 {
		t.Fatalf("beta's own: %s v%d", p.TenantID, p.ProfileVersion)
	}
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("beta", "shared", 2))); p.TenantID != "acme" {
		t.Fatalf("version 2 is acme's: %s", p.TenantID)
	}
	// Shipped profiles: every tenant sees them; a tenant's own version of
	// the same id is preferred in its own lookups only (it can only be
	// private: TestShippedIDsStayPrivate).
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("beta", "rocky-9-base", 0))); !p.Shipped() || p.TenantID != authz.BuiltinTenant {
		t.Fatalf("shipped: %+v", p)
	}
	e.create("acme", "rocky-9-base", 1, profiles.Private)
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("acme", "rocky-9-base", 1))); p.TenantID != "acme" {
		t.Fatalf("acme's own version is preferred to the shipped one: %s", p.TenantID)
	}
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("beta", "rocky-9-base", 1))); !p.Shipped() {
		t.Fatalf("another tenant's private version shadows the shipped one: %s", p.TenantID)
	}
	_, err = profiles.Get(e.Ctx, e.DB, ref("beta", "rocky-9-base", 7))
	fixture.Code(t, err, errs.NotFound, "")
	// A deleted version is invisible to everyone, its owner included.
	fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "shared", 2)))
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("acme", "shared", 0))); p.ProfileVersion != 1 {
		t.Fatalf("after deleting v2 the latest is v%d", p.ProfileVersion)
	}
	_, err = profiles.Get(e.Ctx, e.DB, ref("beta", "shared", 2))
	fixture.Code(t, err, errs.NotFound, "")

	// The graph's batch read: a private version is read in its owner's
	// scope only; the zero scope reads nothing.
	key := profiles.Key{TenantID: "acme", ProfileID: "secret", ProfileVersion: 1}
	for _, c := range []struct {
		scope authz.Scope
		want  int
	}{{authz.TenantScope("acme"), 1}, {authz.TenantScope("beta"), 0}, {authz.Scope{}, 0}} {
		if got := fixture.Must(profiles.ByKeys(e.Ctx, e.DB, c.scope, []profiles.Key{key})); len(got) != c.want {
			t.Fatalf("scope %v reads %d", c.scope, len(got))
		}
	}
}

// Nobody writes to the builtin tenant, the operator included; a shipped
// profile cannot be deleted or updated.
func TestBuiltinIsReadOnly(t *testing.T) {
	e := newEnv(t)
	op := e.Operator()
	_, err := fixture.Call[profiles.Profile](e.F, op, "profiles.create", map[string]any{"tenantId": authz.BuiltinTenant, "document": doc("mine", 1)})
	fixture.Code(t, err, errs.PermissionDenied, "")
	_, err = fixture.Call[profiles.Deleted](e.F, e.acme.Admin, "profiles.delete", map[string]any{"tenantId": "acme", "profileId": "rocky-9-base"})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[profiles.Profile](e.F, e.acme.Admin, "profiles.update",
		map[string]any{"tenantId": "acme", "profileId": "rocky-9-base", "profileVersion": 1, "visibility": "private"})
	fixture.Code(t, err, errs.NotFound, "")
	// Reads of the shipped profiles are every reader's.
	fixture.Must(fixture.Call[profiles.Profile](e.F, e.beta.Viewer, "profiles.get", map[string]any{"tenantId": "beta", "profileId": "rocky-9-base"}))
}

func TestUpdateRules(t *testing.T) {
	e := newEnv(t)
	e.create("acme", "gpu-base", 1, "")
	up := func(in profiles.UpdateInput) (*profiles.Profile, error) {
		in.TenantID, in.ProfileID, in.ProfileVersion = "acme", "gpu-base", 1
		return profiles.Update(e.Ctx, e.DB, &in)
	}
	_, err := up(profiles.UpdateInput{})
	fixture.Code(t, err, errs.InvalidInput, "document")
	_, err = up(profiles.UpdateInput{Document: doc("other", 1)})
	fixture.Code(t, err, errs.InvalidInput, "document.id")
	_, err = up(profiles.UpdateInput{Document: doc("gpu-base", 2)})
	fixture.Code(t, err, errs.InvalidInput, "document.version")
	_, err = up(profiles.UpdateInput{Document: doc("gpu-base", 1, func(d map[string]any) { d["name"] = 7 })})
	fixture.Code(t, err, errs.InvalidInput, "document.name")

	p := fixture.Must(up(profiles.UpdateInput{Document: doc("gpu-base", 1, func(d map[string]any) { d["name"] = "renamed" }), ExpectedVersion: fixture.Ptr(1)}))
	if p.RowVersion != 2 || !strings.Contains(string(p.Document), "renamed") {
		t.Fatalf("updated: %+v", p)
	}
	_, err = up(profiles.UpdateInput{Visibility: fixture.Ptr(profiles.Public), ExpectedVersion: fixture.Ptr(1)})
	if fixture.Code(t, err, errs.Conflict, "").Details["rowVersion"] != 2 {
		t.Fatalf("conflict details: %v", err)
	}
	// Another tenant's version, even a public one, is NOT_FOUND to update.
	fixture.Must(up(profiles.UpdateInput{Visibility: fixture.Ptr(profiles.Public)}))
	_, err = profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "beta", ProfileID: "gpu-base", ProfileVersion: 1, Visibility: fixture.Ptr(profiles.Private)})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[profiles.Profile](e.F, e.beta.Admin, "profiles.update",
		map[string]any{"tenantId": "beta", "profileId": "gpu-base", "profileVersion": 1, "visibility": "private"})
	fixture.Code(t, err, errs.NotFound, "")

	// Used by a workflow: the document is fixed, the visibility is not.
	use(t, e, "acme", "gpu-base", nil)
	_, err = up(profiles.UpdateInput{Document: doc("gpu-base", 1)})
	fixture.Code(t, err, errs.InvalidState, "document")
	if p = fixture.Must(up(profiles.UpdateInput{Visibility: fixture.Ptr(profiles.Private)})); p.Visibility != profiles.Private || !p.Used {
		t.Fatalf("a used version's visibility: %+v", p)
	}
	// Deleted, it is NOT_FOUND to update, and its id and version are not
	// stored again (TestDeletedVersionIsNotCreatedAgain).
	fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "gpu-base", 1)))
	_, err = up(profiles.UpdateInput{Visibility: fixture.Ptr(profiles.Public)})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: doc("gpu-base", 1)})
	fixture.Code(t, err, errs.Conflict, "document.version")
}

// use runs what a workflow's create does with a profile: resolve and lock
// it, mark it used, and snapshot the document, in one transaction.
func use(t testing.TB, e *env, tenant, id string, version *int) (snapshot string, err error) {
	err = e.Tx(func(tx *sqlx.Tx) error {
		p, err := profiles.ForUse(e.Ctx, tx, tenant, id, version)
		if err != nil {
			return err
		}
		if _, err := profiles.MarkUsed(e.Ctx, tx, p); err != nil {
			return err
		}
		snapshot = string(p.Document)
		return nil
	})
	return snapshot, err
}

// A document update racing the first uses: every workflow snapshots the
// document that stays stored, because an update either commits before the
// first use or is refused after it.
func TestUpdateRacesFirstUse(t *testing.T) {
	e := newEnv(t)
	for round := 0; round < 5; round++ {
		id := fmt.Sprintf("race-%d", round)
		e.create("acme", id, 1, "")
		var wg sync.WaitGroup
		var mu sync.Mutex
		var snapshots []string
		for i := 0; i < 6; i++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				s, err := use(t, e, "acme", id, nil)
				if err != nil {
					t.Errorf("use: %v", err)
					return
				}
				mu.Lock()
				snapshots = append(snapshots, s)
				mu.Unlock()
			}()
			go func(i int) {
				defer wg.Done()
				// Through the method: the update runs in its transaction,
				// which holds the row lock from the check to the write.
				_, err := fixture.Call[profiles.Profile](e.F, e.acme.Member, "profiles.update", map[string]any{"tenantId": "acme", "profileId": id,
					"profileVersion": 1, "document": doc(id, 1, func(d map[string]any) { d["name"] = fmt.Sprint("v", i) })})
				if err != nil && errs.CodeOf(err) != errs.InvalidState {
					t.Errorf("update: %v", err)
				}
			}(i)
		}
		wg.Wait()
		final := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("acme", id, 1)))
		for _, s := range snapshots {
			if s != string(final.Document) {
				t.Fatalf("a workflow snapshotted %s; the stored document is %s", s, final.Document)
			}
		}
		if !final.Used {
			t.Fatal("not marked used")
		}
	}
}

// Concurrent creates of one id and version: one wins, the rest CONFLICT.
func TestConcurrentCreates(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	res := make([]error, 10)
	for i := range res {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, res[i] = fixture.Call[profiles.Profile](e.F, e.acme.Member, "profiles.create", map[string]any{"tenantId": "acme", "document": doc("once", 1)})
		}(i)
	}
	wg.Wait()
	ok := 0
	for _, err := range res {
		if err == nil {
			ok++
		} else if errs.CodeOf(err) != errs.Conflict {
			t.Fatalf("a loser: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d creates won", ok)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	for v := 1; v <= 3; v++ {
		e.create("acme", "multi", v, profiles.Public)
	}
	_, err := profiles.Delete(e.Ctx, e.DB, ref("beta", "multi", 0))
	fixture.Code(t, err, errs.NotFound, "")
	if d := fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "multi", 2))); d.Deleted != 1 {
		t.Fatalf("deleted %d", d.Deleted)
	}
	_, err = profiles.Delete(e.Ctx, e.DB, ref("acme", "multi", 2))
	fixture.Code(t, err, errs.NotFound, "")
	if d := fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "multi", 0))); d.Deleted != 2 {
		t.Fatalf("deleted %d of the rest", d.Deleted)
	}
	_, err = profiles.Delete(e.Ctx, e.DB, ref("acme", "multi", 0))
	fixture.Code(t, err, errs.NotFound, "")
	// A workflow that locked a version before its delete committed resolves
	// afresh: nothing is left.
	_, err = use(t, e, "acme", "multi", nil)
	fixture.Code(t, err, errs.NotFound, "")
}

// Validate reports issues instead of failing; render fails with them.
func TestValidateAndRender(t *testing.T) {
	e := newEnv(t)
	e.create("acme", "good", 1, "")
	v := fixture.Must(profiles.Validate(e.Ctx, e.DB, ref("acme", "good", 1)))
	if !v.Valid || len(v.Issues) != 0 {
		t.Fatalf("valid profile: %+v", v)
	}
	r := fixture.Must(profiles.RenderProfile(e.Ctx, e.DB, ref("acme", "good", 1)))
	if len(r.Steps) < 4 || r.Steps[0].Use != "disk.wipe" || r.Profile.ProfileID != "good" {
		t.Fatalf("render: %+v", r.Steps)
	}
	// os.install expands into several steps; phases never go backwards.
	rank := map[string]int{}
	for i, p := range profiles.Phases {
		rank[p] = i
	}
	for i, s := range r.Steps {
		if s.Index != i || (i > 0 && rank[s.Phase] < rank[r.Steps[i-1].Phase]) {
			t.Fatalf("step %d: %+v after %+v", i, s, r.Steps[max(i-1, 0)])
		}
	}
	if uses := fmt.Sprint(r.Steps); !strings.Contains(uses, "drivers") {
		t.Fatalf("no driver step: %v", uses)
	}

	e.create("acme", "bad", 1, "", func(d map[string]any) {
		d["steps"] = []any{
			map[string]any{"use": "disk.wipe", "with": map[string]any{"devices": []any{}}},
			map[string]any{"use": "no.such.step"},
		}
	})
	v = fixture.Must(profiles.Validate(e.Ctx, e.DB, ref("acme", "bad", 1)))
	codes := map[string]string{}
	for _, is := range v.Issues {
		codes[is.Path] = is.Code
	}
	if v.Valid || codes["document.steps[1].use"] != profiles.IssueUnknownStep || len(v.Issues) < 2 {
		t.Fatalf("issues: %+v", v.Issues)
	}
	found := false
	for p, c := range codes {
		found = found || (strings.HasPrefix(p, "document.steps[0]") && c == profiles.IssueInvalidWith)
	}
	if !found {
		t.Fatalf("an empty devices list passed disk.wipe: %+v", v.Issues)
	}
	_, err := profiles.RenderProfile(e.Ctx, e.DB, ref("acme", "bad", 1))
	if e2 := fixture.Code(t, err, errs.InvalidInput, fixture.AnyPath); e2.Details["issues"] == nil {
		t.Fatalf("render's error carries no issues: %v", e2.Details)
	}
	// What a step's with could pass that it must not (a probe): a device
	// path through "..", a userData over 65536 bytes in fewer characters,
	// and image.write's verify false (set to true over it, silently).
	for i, w := range []struct {
		use  string
		with map[string]any
		path string
	}{
		{"disk.wipe", map[string]any{"devices": []any{"/dev/../../etc/passwd"}}, "document.steps[0].with.devices[0]"},
		{"disk.wipe", map[string]any{"devices": []any{"/dev/nvme0n1", "/dev/disk/./x"}}, "document.steps[0].with.devices[1]"},
		{"disk.wipe", map[string]any{"devices": []any{"/dev/" + strings.Repeat("a", 129)}}, "document.steps[0].with.devices[0]"},
		{"cloud-init.write", map[string]any{"userData": strings.Repeat("é", 40000)}, "document.steps[0].with.userData"},
		{"image.write", map[string]any{"verify": false}, "document.steps[0].with.verify"},
	} {
		id := fmt.Sprintf("loose-%d", i)
		e.create("acme", id, 1, "", func(d map[string]any) {
			d["steps"] = []any{map[string]any{"use": w.use, "with": w.with}}
		})
		v := fixture.Must(profiles.Validate(e.Ctx, e.DB, ref("acme", id, 1)))
		if v.Valid || len(v.Issues) != 1 || v.Issues[0].Code != profiles.IssueInvalidWith || v.Issues[0].Path != w.path {
			t.Fatalf("%s with %v: %+v", w.use, w.with, v.Issues)
		}
	}
	for i, dev := range []string{"/dev/nvme0n1", "/dev/disk/by-id/nvme-Samsung_SSD_990.x", "/dev/" + strings.Repeat("a", 128)} {
		id := fmt.Sprintf("tight-%d", i)
		e.create("acme", id, 1, "", func(d map[string]any) {
			d["steps"] = []any{map[string]any{"use": "disk.wipe", "with": map[string]any{"devices": []any{dev}}}}
		})
		if v := fixture.Must(profiles.Validate(e.Ctx, e.DB, ref("acme", id, 1))); !v.Valid {
			t.Fatalf("%s: %+v", dev, v.Issues)
		}
	}
	_, err = profiles.Validate(e.Ctx, e.DB, ref("beta", "bad", 1))
	fixture.Code(t, err, errs.NotFound, "")
	// Every shipped profile is valid.
	for _, id := range []string{"rocky-9-base", "ubuntu-24.04-gpu-nvidia"} {
		if v := fixture.Must(profiles.Validate(e.Ctx, e.DB, ref("beta", id, 0))); !v.Valid {
			t.Fatalf("shipped %s: %+v", id, v.Issues)
		}
	}
}

// list: the tenant's own, public and shipped profiles ordered by (id,
// version, owner), each once across pages of every size, with no cursor on
// the last page; a row stored before the cursor does not shift the pages.
func TestListPages(t *testing.T) {
	e := newEnv(t)
	e.create("acme", "a-own", 1, "")
	e.create("acme", "a-own", 2, "")
	e.create("beta", "a-own", 1, profiles.Public) // same id and version, another owner
	e.create("beta", "b-private", 1, "")          // not acme's to see
	e.create("beta", "z-public", 1, profiles.Public)
	list := func(tenant string, limit int) []string {
		var out []string
		cursor := ""
		for n := 0; ; n++ {
			p := fixture.Must(profiles.List(e.Ctx, e.DB, &profiles.ListInput{TenantID: tenant, Limit: limit, Cursor: cursor}))
			if len(p.Items) > limit || n > 20 {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Items))
			}
			for _, x := range p.Items {
				out = append(out, fmt.Sprintf("%s/%d@%s", x.ProfileID, x.ProfileVersion, x.TenantID))
			}
			if p.Cursor == nil {
				return out
			}
			cursor = *p.Cursor
			if n == 0 && limit == 2 && tenant == "acme" {
				// Stored before the cursor: it must not shift what follows.
				e.create("acme", "a-aaa", 1, "")
			}
		}
	}
	all := list("acme", 200)
	for _, s := range all {
		if strings.HasPrefix(s, "b-private") {
			t.Fatalf("acme lists beta's private profile: %v", all)
		}
	}
	// Own and public versions of one id sort by owner after version; the
	// shipped ones are among them.
	if len(all) != 7 || !strings.HasPrefix(all[0], "a-own/1@") || !strings.HasPrefix(all[2], "a-own/2@acme") || all[6] != "z-public/1@beta" {
		t.Fatalf("list: %v", all)
	}
	for limit := 1; limit <= 7; limit++ {
		got := list("acme", limit)
		if limit == 2 {
			// a-aaa was stored after the first page: it is not seen.
			if strings.Join(got, ",") != strings.Join(all, ",") {
				t.Fatalf("limit 2 with an insert before the cursor: %v, want %v", got, all)
			}
			all = list("acme", 200)
			continue
		}
		if strings.Join(got, ",") != strings.Join(all, ",") {
			t.Fatalf("limit %d: %v, want %v", limit, got, all)
		}
	}
	counts := fixture.Must(profiles.CountByTenant(e.Ctx, e.DB, []string{"acme", "beta"}))
	if counts["acme"] != len(all) {
		t.Fatalf("acme counts %d, lists %d", counts["acme"], len(all))
	}
	_, err := profiles.List(e.Ctx, e.DB, &profiles.ListInput{TenantID: "acme", Limit: 5, Cursor: "garbage"})
	fixture.Code(t, err, errs.InvalidInput, "cursor")
}

// A profile's versions in the graph: the owner reads them all, another
// tenant only the public ones, and so does the zero scope (it holds no
// tenant); shipped versions are read by the scopes holding builtin.
func TestVersionPages(t *testing.T) {
	e := newEnv(t)
	e.create("acme", "multi", 1, profiles.Private)
	e.create("acme", "multi", 2, profiles.Public)
	e.create("acme", "multi", 3, profiles.Private)
	e.create("acme", "multi", 4, profiles.Public)
	fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "multi", 4))) // no one's to read, the operator's included
	parent := profiles.VersionsParent("acme", "multi")
	shipped := profiles.VersionsParent(authz.BuiltinTenant, "rocky-9-base")
	op := fixture.Must(authz.LoadCaller(e.As(e.Operator()), e.DB, e.Operator())).Scope(authz.ProfilesRead)
	for _, c := range []struct {
		name           string
		scope          authz.Scope
		versions       string
		count, shipped int
	}{
		{"the owner", authz.TenantScope("acme"), "[1 2 3]", 3, 0},
		{"another tenant", authz.TenantScope("beta"), "[2]", 1, 0},
		{"the operator", op, "[1 2 3]", 3, 0},
		{"the zero scope", authz.Scope{}, "[2]", 1, 0},
	} {
		rows := fixture.Must(profiles.VersionPages(e.Ctx, e.DB, c.scope, []string{parent}, "", 10))
		var got []int
		for _, p := range rows.Items {
			got = append(got, p.ProfileVersion)
		}
		if got == nil {
			got = []int{}
		}
		counts := fixture.Must(profiles.CountVersions(e.Ctx, e.DB, c.scope, []string{parent}))
		if fmt.Sprint(got) != c.versions || counts[parent] != c.count {
			t.Fatalf("%s: versions %v, counted %d", c.name, got, counts[parent])
		}
	}
	// Pages after a version, with one row beyond the page to tell a next one.
	rows := fixture.Must(profiles.VersionPages(e.Ctx, e.DB, authz.TenantScope("acme"), []string{parent}, "1", 1))
	if len(rows.Items) != 2 || rows.Items[0].ProfileVersion != 2 {
		t.Fatalf("after version 1, limit 1: %+v", rows.Items)
	}
	// Shipped versions: every reader with the builtin tenant in its scope.
	if n := fixture.Must(profiles.CountVersions(e.Ctx, e.DB, authz.TenantScope(authz.BuiltinTenant), []string{shipped})); n[shipped] != 1 {
		t.Fatalf("shipped versions counted %d", n[shipped])
	}
	if n := fixture.Must(profiles.CountVersions(e.Ctx, e.DB, authz.Scope{}, []string{shipped})); n[shipped] != 0 {
		t.Fatalf("the zero scope counts %d shipped versions", n[shipped])
	}
}
