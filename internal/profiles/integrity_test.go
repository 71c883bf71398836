package profiles_test

import (
	"fmt"
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
