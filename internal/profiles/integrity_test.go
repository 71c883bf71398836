package profiles_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

func named(name string) func(map[string]any) { return func(d map[string]any) { d["name"] = name } }

// storedName is the name in the stored document of a version, deleted or
// not, read past every method.
func storedName(t *testing.T, e *env, tenant, id string, version int) string {
	t.Helper()
	var name string
	if err := e.DB.GetContext(e.Ctx, &name, `SELECT document->>'name' FROM profiles
		WHERE tenant_id = $1 AND profile_id = $2 AND profile_version = $3`, tenant, id, version); err != nil {
		t.Fatal(err)
	}
	return name
}

// The probe's repro: a used version deleted and created again kept its
// id and version and took a new document, while the workflow still names
// that id and version. A deleted version is hidden, not gone: its id and
// version still exist, so create is CONFLICT, and the version stays hidden.
func TestDeletedVersionIsNotCreatedAgain(t *testing.T) {
	e := newEnv(t)
	call := func(method string, in map[string]any) (*profiles.Profile, error) {
		return fixture.Call[profiles.Profile](e.F, e.acme.Member, "profiles."+method, in)
	}
	fixture.Must(call("create", map[string]any{"tenantId": "acme", "document": doc("p-del", 1, named("orig"))}))
	fixture.Must(use(t, e, "acme", "p-del", nil))
	_, err := call("update", map[string]any{"tenantId": "acme", "profileId": "p-del", "profileVersion": 1, "document": doc("p-del", 1, named("changed"))})
	fixture.Code(t, err, errs.InvalidState, "document")
	d := fixture.Must(fixture.Call[profiles.Deleted](e.F, e.acme.Member, "profiles.delete", map[string]any{"tenantId": "acme", "profileId": "p-del", "profileVersion": 1}))
	if d.Deleted != 1 {
		t.Fatalf("deleted %d", d.Deleted)
	}
	_, err = call("create", map[string]any{"tenantId": "acme", "document": doc("p-del", 1, named("other"))})
	fixture.Code(t, err, errs.Conflict, "document.version")
	if n := storedName(t, e, "acme", "p-del", 1); n != "orig" {
		t.Fatalf("the used version's document was replaced: name %q", n)
	}
	// Still hidden from every lookup and from the list.
	_, err = profiles.Get(e.Ctx, e.DB, ref("acme", "p-del", 1))
	fixture.Code(t, err, errs.NotFound, "")
	_, err = profiles.Get(e.Ctx, e.DB, ref("acme", "p-del", 0))
	fixture.Code(t, err, errs.NotFound, "")
	for _, p := range fixture.Must(profiles.List(e.Ctx, e.DB, &profiles.ListInput{TenantID: "acme", Limit: 200})).Items {
		if p.ProfileID == "p-del" {
			t.Fatalf("a deleted version is listed: %+v", p)
		}
	}

	// A version no workflow used is no different: its id and version are
	// taken once stored. The next version can be created.
	e.create("acme", "p-unused", 1, "")
	e.create("acme", "p-unused", 2, "")
	fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "p-unused", 0)))
	for v := 1; v <= 2; v++ {
		_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "acme", Document: doc("p-unused", v)})
		fixture.Code(t, err, errs.Conflict, "document.version")
	}
	if p := e.create("acme", "p-unused", 3, ""); p.ProfileVersion != 3 || p.Used {
		t.Fatalf("the next version: %+v", p)
	}
	// Another tenant's id and version are its own.
	e.create("beta", "p-del", 1, "")
}

// Deletes and creates of one used version racing: no create ever stores
// it again, one delete hides it and the others find nothing, and the
// stored document stays the one the workflow used.
func TestDeleteRacesCreate(t *testing.T) {
	e := newEnv(t)
	for round := 0; round < 4; round++ {
		id := fmt.Sprintf("p-race-%d", round)
		vis := []string{profiles.Private, profiles.Public}[round%2]
		e.create("acme", id, 1, vis, named("orig"))
		fixture.Must(use(t, e, "acme", id, nil))
		const n = 12
		var wg sync.WaitGroup
		created, deleted := make([]error, n), make([]*profiles.Deleted, n)
		delErr := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(2)
			go func(i int) {
				defer wg.Done()
				_, created[i] = fixture.Call[profiles.Profile](e.F, e.acme.Member, "profiles.create",
					map[string]any{"tenantId": "acme", "visibility": vis, "document": doc(id, 1, named(fmt.Sprint("new-", i)))})
			}(i)
			go func(i int) {
				defer wg.Done()
				deleted[i], delErr[i] = fixture.Call[profiles.Deleted](e.F, e.acme.Member, "profiles.delete",
					map[string]any{"tenantId": "acme", "profileId": id, "profileVersion": 1})
			}(i)
		}
		wg.Wait()
		hidden := 0
		for i := 0; i < n; i++ {
			if errs.CodeOf(created[i]) != errs.Conflict {
				t.Fatalf("round %d: a create of the existing version answered %v", round, created[i])
			}
			switch {
			case delErr[i] == nil && deleted[i].Deleted == 1:
				hidden++
			case errs.CodeOf(delErr[i]) != errs.NotFound:
				t.Fatalf("round %d: a delete answered %v", round, delErr[i])
			}
		}
		if hidden != 1 {
			t.Fatalf("round %d: %d deletes hid the version", round, hidden)
		}
		if name := storedName(t, e, "acme", id, 1); name != "orig" {
			t.Fatalf("round %d: stored document is now %q", round, name)
		}
	}
}

// The probe's second repro: a tenant published a profile under an id a
// module ships, and every other tenant's lookup (and workflows) took it
// instead of the shipped one. A tenant may keep such an id private (its own
// lookups prefer it, as the lookup order says); making it public is
// CONFLICT at visibility, on create and on update.
func TestShippedIDsStayPrivate(t *testing.T) {
	e := newEnv(t)
	e.F.Tenant("gamma")
	const id = "ubuntu-24.04-gpu-nvidia"
	evil := func(d map[string]any) {
		d["image"].(map[string]any)["url"] = "https://evil.example/noble.raw.zst"
	}
	_, err := fixture.Call[profiles.Profile](e.F, e.beta.Member, "profiles.create",
		map[string]any{"tenantId": "beta", "visibility": "public", "document": doc(id, 1, evil)})
	fixture.Code(t, err, errs.Conflict, "visibility")
	_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "gamma", Visibility: fixture.Ptr(profiles.Public), Document: doc(id, 2, evil)})
	fixture.Code(t, err, errs.Conflict, "visibility")

	// Private: beta's own lookups take it, nobody else's.
	e.create("beta", id, 1, profiles.Private, evil)
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("beta", id, 0))); p.TenantID != "beta" {
		t.Fatalf("beta's own: %+v", p)
	}
	_, err = fixture.Call[profiles.Profile](e.F, e.beta.Member, "profiles.update",
		map[string]any{"tenantId": "beta", "profileId": id, "profileVersion": 1, "visibility": "public"})
	fixture.Code(t, err, errs.Conflict, "visibility")
	for _, tenant := range []string{"acme", "gamma"} {
		if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref(tenant, id, 0))); !p.Shipped() {
			t.Fatalf("%s's lookup of %s: %s's", tenant, id, p.TenantID)
		}
		snap := fixture.Must(use(t, e, tenant, id, nil))
		if strings.Contains(snap, "evil.example") {
			t.Fatalf("%s's workflow runs another tenant's image: %s", tenant, snap)
		}
	}
	// The shipped profile itself stays NOT_FOUND to write.
	_, err = profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "acme", ProfileID: id, ProfileVersion: 1, Visibility: fixture.Ptr(profiles.Public)})
	fixture.Code(t, err, errs.NotFound, "")
}

// A public profile id belongs to one tenant: another tenant making a
// version of it public (create or update) is CONFLICT at visibility, so
// its publishing a later version cannot switch every tenant's lookups to
// it. The id is free again once its owner has no public version left.
func TestPublicIDBelongsToOneTenant(t *testing.T) {
	e := newEnv(t)
	e.F.Tenant("gamma")
	e.create("acme", "shared", 1, profiles.Public)
	_, err := fixture.Call[profiles.Profile](e.F, e.beta.Member, "profiles.create",
		map[string]any{"tenantId": "beta", "visibility": "public", "document": doc("shared", 2)})
	fixture.Code(t, err, errs.Conflict, "visibility")
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("gamma", "shared", 0))); p.TenantID != "acme" || p.ProfileVersion != 1 {
		t.Fatalf("gamma's lookup: %s v%d", p.TenantID, p.ProfileVersion)
	}
	// Private versions of the id stay every tenant's own business.
	e.create("beta", "shared", 2, profiles.Private)
	_, err = profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "beta", ProfileID: "shared", ProfileVersion: 2, Visibility: fixture.Ptr(profiles.Public)})
	fixture.Code(t, err, errs.Conflict, "visibility")
	// The owner publishes more versions, by create and by update.
	e.create("acme", "shared", 2, profiles.Public)
	e.create("acme", "shared", 3, profiles.Private)
	fixture.Must(profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "acme", ProfileID: "shared", ProfileVersion: 3, Visibility: fixture.Ptr(profiles.Public)}))

	// Once acme has no public version left (one made private, the others
	// deleted), another tenant may publish the id, and then acme may not.
	fixture.Must(profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "acme", ProfileID: "shared", ProfileVersion: 1, Visibility: fixture.Ptr(profiles.Private)}))
	_, err = profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "beta", ProfileID: "shared", ProfileVersion: 2, Visibility: fixture.Ptr(profiles.Public)})
	fixture.Code(t, err, errs.Conflict, "visibility")
	fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "shared", 2)))
	fixture.Must(profiles.Delete(e.Ctx, e.DB, ref("acme", "shared", 3)))
	fixture.Must(profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "beta", ProfileID: "shared", ProfileVersion: 2, Visibility: fixture.Ptr(profiles.Public)}))
	_, err = profiles.Update(e.Ctx, e.DB, &profiles.UpdateInput{TenantID: "acme", ProfileID: "shared", ProfileVersion: 1, Visibility: fixture.Ptr(profiles.Public)})
	fixture.Code(t, err, errs.Conflict, "visibility")
	if p := fixture.Must(profiles.Get(e.Ctx, e.DB, ref("gamma", "shared", 0))); p.TenantID != "beta" {
		t.Fatalf("gamma's lookup after the id changed hands: %s", p.TenantID)
	}
	// A refused create stores nothing and leaves the id with its owner.
	_, err = profiles.Create(e.Ctx, e.DB, &profiles.CreateInput{TenantID: "gamma", Visibility: fixture.Ptr(profiles.Public), Document: doc("shared", 9)})
	fixture.Code(t, err, errs.Conflict, "visibility")
	_, err = profiles.Get(e.Ctx, e.DB, ref("gamma", "shared", 9))
	fixture.Code(t, err, errs.NotFound, "")
	assertOnePublisher(t, e, "shared")
}

// assertOnePublisher fails t when more than one tenant has a live public
// version of id.
func assertOnePublisher(t *testing.T, e *env, id string) {
	t.Helper()
	var n int
	if err := e.DB.GetContext(e.Ctx, &n, `SELECT count(DISTINCT tenant_id) FROM profiles
		WHERE profile_id = $1 AND visibility = 'public' AND deleted_at IS NULL`, id); err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("%d tenants publish %s", n, id)
	}
}

// Tenants publishing one id at once, by create and by update, several
// versions each: the versions of one tenant win, every other tenant's are
// CONFLICT, and the id ends with one publisher.
func TestConcurrentPublish(t *testing.T) {
	e := newEnv(t)
	tenants := []fixture.Tenant{e.acme, e.beta}
	for i := 0; i < 6; i++ {
		tenants = append(tenants, e.F.Tenant(fmt.Sprint("t", i)))
	}
	for round, mode := range []string{"create", "update", "create", "update"} {
		id := fmt.Sprintf("contested-%d", round)
		if mode == "update" {
			for _, tn := range tenants {
				e.create(tn.ID, id, 1, profiles.Private)
				e.create(tn.ID, id, 2, profiles.Private)
			}
		}
		type result struct {
			tenant string
			err    error
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var results []result
		for _, tn := range tenants {
			for v := 1; v <= 2; v++ {
				wg.Add(1)
				go func(tn fixture.Tenant, v int) {
					defer wg.Done()
					var err error
					if mode == "create" {
						_, err = fixture.Call[profiles.Profile](e.F, tn.Member, "profiles.create",
							map[string]any{"tenantId": tn.ID, "visibility": "public", "document": doc(id, v)})
					} else {
						_, err = fixture.Call[profiles.Profile](e.F, tn.Member, "profiles.update",
							map[string]any{"tenantId": tn.ID, "profileId": id, "profileVersion": v, "visibility": "public"})
					}
					mu.Lock()
					results = append(results, result{tn.ID, err})
					mu.Unlock()
				}(tn, v)
			}
		}
		wg.Wait()
		winners := map[string]int{}
		for _, r := range results {
			if r.err == nil {
				winners[r.tenant]++
			} else if errs.CodeOf(r.err) != errs.Conflict {
				t.Fatalf("round %d (%s): %s answered %v", round, mode, r.tenant, r.err)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d (%s): tenants publishing %s: %v", round, mode, id, winners)
		}
		for tenant, n := range winners {
			if n != 2 {
				t.Fatalf("round %d (%s): the owner %s published %d of its 2 versions", round, mode, tenant, n)
			}
		}
		assertOnePublisher(t, e, id)
	}
}
