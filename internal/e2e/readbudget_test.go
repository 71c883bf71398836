package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
)

// A request reads at most store.ReadBudget of large values, whatever its
// pages: a GraphQL query of six pages of 100 profiles of 128 KiB each
// (75 MiB of documents; each page's first differs, so no page is loaded
// once for all) is refused saying so, and no page alone is; the method
// surface's largest page stays within it. A probe's query of five pages
// of 20 profiles of ~1 MiB was a 97.5 MB answer.
func TestAQueryReadsAtMostTheReadBudget(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	const n = 100
	for i := 0; i < n; i++ {
		d := profileDoc(fmt.Sprintf("big-%03d", i), 1)
		d["userData"] = strings.Repeat("x", profiles.MaxUserData)
		d["steps"] = []any{map[string]any{"use": "os.install", "with": map[string]any{"pad": strings.Repeat("p", profiles.MaxDocument-profiles.MaxUserData-1024)}}}
		must(t, e.Call(acme.Admin.Token, "profiles/create", map[string]any{"tenantId": "acme", "document": d}))
	}
	page := func(alias string, first int) string {
		return fmt.Sprintf(`%s: profiles(first: %d) { edges { node { profileId document } } }`, alias, first)
	}
	one := gqlOK(t, e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+page("a", n)+` } }`, nil))
	if got := len(dig(t, one, "tenant", "a", "edges").([]any)); got != n {
		t.Fatalf("one page: %d profiles", got)
	}
	var pages []string
	for i := 0; i < 6; i++ {
		pages = append(pages, page(fmt.Sprint("p", i), n-i))
	}
	r := e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+strings.Join(pages, " ")+` } }`, nil)
	gqlExpect(t, r, inv, anyPath)
	if raw := string(r.Raw); !strings.Contains(raw, `"reason":"read-budget"`) || !strings.Contains(raw, fmt.Sprint(store.ReadBudget)) {
		t.Fatalf("six pages: %.2000s", r.Raw)
	}
	// The same page under six aliases is loaded once, and was answered six
	// times for nothing: what the answer holds is spent too.
	pages = pages[:0]
	for i := 0; i < 6; i++ {
		pages = append(pages, page(fmt.Sprint("s", i), n))
	}
	r = e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+strings.Join(pages, " ")+` } }`, nil)
	if raw := string(r.Raw); !strings.Contains(raw, `"reason":"read-budget"`) {
		t.Fatalf("six aliases of one page: %.2000s", r.Raw)
	}
	l := must(t, e.Call(acme.Viewer.Token, "profiles/list", map[string]any{"tenantId": "acme", "limit": 200}))
	if got := len(items(t, l)); got < n {
		t.Fatalf("profiles.list: %d items", got)
	}
}

// Pools' policies are large values too (64 KiB each): they spend the read
// budget as they are loaded and as the answer holds them. A probe's 100
// aliases of one page of 40 pools answered 269 MB, loaded once.
func TestPoolPoliciesSpendTheReadBudget(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	const n = 40
	// "<" is stored as one byte and answered as six ("\u003c"): what is
	// read is not what is answered.
	policy := `{"pad": "` + strings.Repeat("<", pools.MaxPolicyBytes-16) + `"}` // sent as written (a string body)
	for i := 0; i < n; i++ {
		must(t, e.Call(acme.Admin.Token, "pools/create", fmt.Sprintf(`{"tenantId": "acme", "name": "p%02d", "site": "fra1",
			"gpuModel": "H100", "sharingMode": "exclusive", "kind": "bare-metal", "policy": %s}`, i, policy)))
	}
	page := func(alias string) string {
		return fmt.Sprintf(`%s: pools(first: 50) { edges { node { poolId policy } } }`, alias)
	}
	one := gqlOK(t, e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+page("a")+` } }`, nil))
	if got := len(dig(t, one, "tenant", "a", "edges").([]any)); got != n {
		t.Fatalf("one page: %d pools", got)
	}
	// 30 × 40 × 64 KiB: 75 MiB spent; 5 aliases spend 12.5 MiB and
	// answer 75 MiB (the answer's own bound, graph.maxAnswer).
	for _, k := range []int{30, 5} {
		var aliases []string
		for i := 0; i < k; i++ {
			aliases = append(aliases, page(fmt.Sprint("a", i)))
		}
		r := e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+strings.Join(aliases, " ")+` } }`, nil)
		if raw := string(r.Raw); !strings.Contains(raw, `"reason":"read-budget"`) || len(raw) > 1<<20 {
			t.Fatalf("%d aliases of one page of policies: %d bytes, %.1000s", k, len(raw), r.Raw)
		}
	}
	if l := must(t, e.Call(acme.Viewer.Token, "pools/list", map[string]any{"tenantId": "acme", "limit": 200})); len(items(t, l)) != n {
		t.Fatalf("pools.list: %d items", len(items(t, l)))
	}
}

// A subscription's event is bounded too: its selection runs again for
// every event, and its complexity (at most 2000) let it answer a pool's
// 64 KiB policy a hundred times per event. Past graph.maxEventAnswer the
// event is an error in its place.
func TestASubscriptionEventIsBounded(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	policy := `{"pad": "` + strings.Repeat("<", pools.MaxPolicyBytes-16) + `"}`
	pool := must(t, e.Call(acme.Admin.Token, "pools/create", `{"tenantId": "acme", "name": "vps", "site": "fra1", "gpuModel": "H100",
		"sharingMode": "exclusive", "kind": "vps-provider", "policy": `+policy+`}`)).Str("poolId")
	var sel []string
	for i := 0; i < 20; i++ { // 20 × 64 KiB × 6 bytes per "<": 7.5 MiB
		sel = append(sel, fmt.Sprintf("p%d: policy", i))
	}
	w := dialWS(t, e)
	w.init(acme.Admin.Token)
	w.send(map[string]any{"id": "s", "type": "subscribe", "payload": map[string]any{
		"query": `subscription { tenantEvents(tenantId: "acme", types: ["instance."]) { eventId instance { pool { ` + strings.Join(sel, " ") + ` } } } }`}})
	// The subscription starts live from when the server has subscribed,
	// which the protocol does not say: create instances until one's event
	// comes.
	var m map[string]any
	for i := 0; m == nil && i < 20; i++ {
		must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, fmt.Sprint("vm", i), 0)))
		var err error
		if m, err = w.read(time.Second); err != nil && err != errQuiet {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(m)
	if !strings.Contains(string(b), `"read-budget"`) || len(b) > 1<<20 {
		t.Fatalf("an event of 7.5 MiB: %d bytes, %.500s", len(b), b)
	}
}
