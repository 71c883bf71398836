package nodes_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// env is a fresh database with tenants acme (owning a bare-metal pool) and
// beta (offered that pool).
type env struct {
	*fixture.F
	acme, beta fixture.Tenant
	pool       string
}

func newEnv(t *testing.T) *env {
	t.Parallel()
	f := fixture.New(t)
	e := &env{F: f, acme: f.Tenant("acme"), beta: f.Tenant("beta")}
	p := fixture.Must(pools.Create(f.Ctx, f.DB, &pools.CreateInput{TenantID: "acme", Name: "metal", Site: "fra1",
		GPUModel: "H100-SXM5-80GB", SharingMode: "exclusive", Kind: "bare-metal"}))
	e.pool = p.PoolID
	fixture.Must(pools.MakeOffer(f.Ctx, f.DB, &pools.OfferInput{TenantID: "acme", PoolID: e.pool, ToTenantID: "beta",
		Quota: pools.Quota{GPUs: 1, Instances: 1}}))
	return e
}

// token makes a join token of the pool with maxUses.
func (e *env) token(maxUses int) string {
	e.T.Helper()
	r := fixture.Must(fixture.Call[nodes.CreatedJoinToken](e.F, e.acme.Admin, "joinTokens.create",
		map[string]any{"tenantId": "acme", "poolId": e.pool, "maxUses": maxUses}))
	return r.Secret
}

func (e *env) join(m testkit.Machine, token string) (*nodes.JoinResult, error) {
	return fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", m.JoinBody(token))
}

// admit joins a fresh machine and returns the result.
func (e *env) admit() *nodes.JoinResult {
	e.T.Helper()
	r := fixture.Must(e.join(testkit.NewMachine(e.T), e.token(1)))
	if r.Status != "admitted" {
		e.T.Fatalf("join: %+v", r)
	}
	return r
}

func placeholder(t testing.TB) testkit.Machine {
	m := testkit.NewMachine(t)
	m.SystemUUID, m.Serial = "03000200-0400-0500-0006-000700080009", "To Be Filled By O.E.M."
	return m
}

func TestJoinTokenRules(t *testing.T) {
	e := newEnv(t)
	// Unknown, used up, revoked: UNAUTHENTICATED (the token is the credential).
	_, err := e.join(testkit.NewMachine(t), "bcj_unknown")
	fixture.Code(t, err, errs.Unauthenticated, "")
	tok := e.token(1)
	fixture.Must(e.join(testkit.NewMachine(t), tok))
	_, err = e.join(testkit.NewMachine(t), tok)
	if fixture.Code(t, err, errs.Unauthenticated, "").Message != "the join token has no uses left" {
		t.Fatalf("a used-up token: %v", err)
	}
	created := fixture.Must(fixture.Call[nodes.CreatedJoinToken](e.F, e.acme.Admin, "joinTokens.create",
		map[string]any{"tenantId": "acme", "poolId": e.pool}))
	if created.JoinToken.MaxUses != 1 || created.JoinToken.State != nodes.TokenActive || created.JoinToken.Uses != 0 {
		t.Fatalf("defaults: %+v", created.JoinToken)
	}
	fixture.Must(fixture.Call[nodes.JoinToken](e.F, e.acme.Admin, "joinTokens.revoke", map[string]any{"tenantId": "acme", "joinTokenId": created.JoinToken.JoinTokenID}))
	_, err = fixture.Call[nodes.JoinToken](e.F, e.acme.Admin, "joinTokens.revoke", map[string]any{"tenantId": "acme", "joinTokenId": created.JoinToken.JoinTokenID})
	fixture.Code(t, err, errs.InvalidState, "")
	_, err = e.join(testkit.NewMachine(t), created.Secret)
	fixture.Code(t, err, errs.Unauthenticated, "")
	// Expired.
	expiring := e.token(5)
	if _, err := e.DB.Exec(`UPDATE join_tokens SET expires_at = now() - interval '1 second' WHERE secret_hash = $1`, auth.Hash(expiring)); err != nil {
		t.Fatal(err)
	}
	_, err = e.join(testkit.NewMachine(t), expiring)
	fixture.Code(t, err, errs.Unauthenticated, "")
	// An archived pool takes no joins and gets no tokens.
	live := e.token(5)
	fixture.Must(pools.Archive(e.Ctx, e.DB, &pools.ArchiveInput{TenantID: "acme", PoolID: e.pool}))
	_, err = e.join(testkit.NewMachine(t), live)
	fixture.Code(t, err, errs.InvalidState, "")
	_, err = fixture.Call[nodes.CreatedJoinToken](e.F, e.acme.Admin, "joinTokens.create", map[string]any{"tenantId": "acme", "poolId": e.pool})
	fixture.Code(t, err, errs.InvalidState, "")
}

// Join tokens are the owner's: a tenant the pool is offered to, or any
// other, does not see the pool's tokens (NOT_FOUND), and a member of the
// owner lacks the permission (PERMISSION_DENIED).
func TestJoinTokensAreTheOwners(t *testing.T) {
	e := newEnv(t)
	in := map[string]any{"tenantId": "beta", "poolId": e.pool}
	_, err := fixture.Call[nodes.CreatedJoinToken](e.F, e.beta.Admin, "joinTokens.create", in)
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[nodes.CreatedJoinToken](e.F, e.acme.Member, "joinTokens.create", map[string]any{"tenantId": "acme", "poolId": e.pool})
	fixture.Code(t, err, errs.PermissionDenied, "")
	_, err = nodes.CreateJoinToken(e.Ctx, e.DB, &nodes.JoinTokenCreateInput{TenantID: "beta", PoolID: e.pool, TTLSeconds: ptr(60), MaxUses: ptr(1)})
	fixture.Code(t, err, errs.NotFound, "")
}

// The certificate of an admitted node is signed by the control plane's CA,
// the one persisted for every replica: two registries over one database
// (two replicas) answer with the same CA, and their certificates verify
// against it.
func TestAdmittedCertificateChainsToThePersistedCA(t *testing.T) {
	e := newEnv(t)
	// A second registry over the same database (another replica) first:
	// it creates the CA; the first registry then reads that one.
	replica := &env{F: &fixture.F{T: t, DB: e.DB, Reg: app.Registry(e.DB, nil, nil, nil), Ctx: e.Ctx}, acme: e.acme, pool: e.pool}
	first := replica.admit()
	second := e.admit()
	persisted := fixture.Must(nodes.EnsureCA(e.Ctx, e.DB))
	for _, r := range []*nodes.JoinResult{first, second} {
		if r.CACertificate != persisted.CertificatePEM() {
			t.Fatalf("the join answered with a CA other than the persisted one")
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(r.CACertificate)) {
			t.Fatal("the CA certificate does not parse")
		}
		b, _ := pem.Decode([]byte(r.Certificate))
		if b == nil {
			t.Fatalf("certificate %q", r.Certificate)
		}
		cert := fixture.Must(x509.ParseCertificate(b.Bytes))
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Fatalf("the node certificate does not chain to the CA: %v", err)
		}
		if cert.Subject.CommonName != r.NodeID {
			t.Fatalf("certificate for %q, node %s", cert.Subject.CommonName, r.NodeID)
		}
	}
}

// The admitted node's credential is a node principal for that node.
func TestAdmittedCredentialIsTheNodes(t *testing.T) {
	e := newEnv(t)
	r := e.admit()
	p := fixture.Must(auth.Authenticate(e.Ctx, e.DB, r.Credential))
	if p.Kind != "node" || p.NodeID != r.NodeID || p.TenantID != "acme" {
		t.Fatalf("principal %+v", p)
	}
	// It reads its own node only through report methods: another node is
	// NOT_FOUND to it.
	other := e.admit()
	_, err := fixture.Call[nodes.Node](e.F, p, "nodes.get", map[string]any{"tenantId": "acme", "nodeId": other.NodeID})
	if err == nil {
		t.Fatal("a node credential read another node")
	}
}

func TestJoinInputRules(t *testing.T) {
	e := newEnv(t)
	tok := e.token(5)
	m := testkit.NewMachine(t)
	body := m.JoinBody(tok)
	body["hardware"].(map[string]any)["macs"] = []string{m.MAC, m.MAC}
	_, err := fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", body)
	fixture.Code(t, err, errs.InvalidInput, "hardware.macs[1]")
	body = m.JoinBody(tok)
	body["csr"] = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
	_, err = fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", body)
	fixture.Code(t, err, errs.InvalidInput, "csr")
	// A key a live node holds joins nothing more; nor does the same machine
	// (by system UUID) with a new key while its node lives.
	first := fixture.Must(e.join(m, tok))
	_, err = e.join(m, tok)
	fixture.Code(t, err, errs.Conflict, "")
	again := testkit.NewMachine(t)
	again.SystemUUID = m.SystemUUID
	_, err = e.join(again, tok)
	if fixture.Code(t, err, errs.Conflict, "").Details["nodeId"] != first.NodeID {
		t.Fatalf("the conflict names no node: %v", err)
	}
	// Also when the join would be deferred (a placeholder serial): it was
	// put in the approval queue, where an approval could only end in this
	// CONFLICT (a probe).
	again.Serial = "To Be Filled By O.E.M."
	_, err = e.join(again, tok)
	if fixture.Code(t, err, errs.Conflict, "").Details["nodeId"] != first.NodeID {
		t.Fatalf("a deferred join of a live node's machine: %v", err)
	}
	again.Serial = testkit.NewMachine(t).Serial
	// Once that node is removed, the machine joins again.
	fixture.Must(nodes.RemoveNode(e.Ctx, e.DB, &nodes.NodeChangeInput{TenantID: "acme", NodeID: first.NodeID}))
	if r := fixture.Must(e.join(again, tok)); r.Status != "admitted" {
		t.Fatalf("after the remove: %+v", r)
	}
}

// Placeholder hardware defers the join; an approval admits exactly one
// retry with the same CSR; a denial refuses it; decisions follow the
// request's states.
func TestApprovalQueue(t *testing.T) {
	e := newEnv(t)
	tok := e.token(5)
	m := placeholder(t)
	r := fixture.Must(e.join(m, tok))
	if r.Status != nodes.Pending || r.JoinRequestID == "" || len(r.Reasons) != 1 || r.Reasons[0].Code != nodes.ReasonPlaceholder {
		t.Fatalf("placeholder join: %+v", r)
	}
	// The retry before a decision answers with the same request; no token use is spent.
	if again := fixture.Must(e.join(m, tok)); again.JoinRequestID != r.JoinRequestID || again.Status != nodes.Pending {
		t.Fatalf("retry: %+v", again)
	}
	ref := map[string]any{"tenantId": "acme", "joinRequestId": r.JoinRequestID}
	// Another tenant does not see the request; the owner's viewer may not approve.
	_, err := fixture.Call[nodes.JoinRequest](e.F, e.beta.Admin, "joinRequests.approve", map[string]any{"tenantId": "beta", "joinRequestId": r.JoinRequestID})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = nodes.GetJoinRequest(e.Ctx, e.DB, &nodes.JoinRequestRefInput{TenantID: "beta", JoinRequestID: r.JoinRequestID})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[nodes.JoinRequest](e.F, e.acme.Viewer, "joinRequests.approve", ref)
	fixture.Code(t, err, errs.PermissionDenied, "")

	approved := fixture.Must(fixture.Call[nodes.JoinRequest](e.F, e.acme.Admin, "joinRequests.approve", ref))
	if approved.State != nodes.Approved || approved.DecidedBy == nil || *approved.DecidedBy != e.acme.Admin.ID {
		t.Fatalf("approved: %+v", approved)
	}
	_, err = fixture.Call[nodes.JoinRequest](e.F, e.acme.Admin, "joinRequests.approve", ref)
	fixture.Code(t, err, errs.InvalidState, "")
	// The approval is for the hardware the owner saw: the same CSR with
	// another UUID, serial or MAC gets nothing of it (it was admitted with
	// whatever hardware it reported; a helper's probe). The request stays
	// approved for the machine it was made for.
	for _, other := range []func(*testkit.Machine){
		func(x *testkit.Machine) { x.SystemUUID = "6f1b2c3d-0000-4000-8000-000000000001" },
		func(x *testkit.Machine) { x.Serial = "TOTALLY-DIFFERENT" },
		func(x *testkit.Machine) { x.MAC = "0a:0b:0c:0d:0e:0f" },
	} {
		x := m
		other(&x)
		_, err = e.join(x, tok)
		if fixture.Code(t, err, errs.PermissionDenied, "").Details["joinRequestId"] != r.JoinRequestID {
			t.Fatalf("other hardware: %v", err)
		}
	}
	// Spelled otherwise, the same ids are the same machine.
	same := m
	same.MAC = strings.ToUpper(m.MAC)
	same.SystemUUID = strings.ToUpper(strings.ReplaceAll(m.SystemUUID, "-", ""))
	admitted := fixture.Must(e.join(same, tok))
	if admitted.Status != "admitted" || admitted.JoinRequestID != r.JoinRequestID {
		t.Fatalf("after the approval: %+v", admitted)
	}
	got := fixture.Must(nodes.GetJoinRequest(e.Ctx, e.DB, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: r.JoinRequestID}))
	if got.State != nodes.Consumed || got.NodeID == nil || *got.NodeID != admitted.NodeID {
		t.Fatalf("consumed: %+v", got)
	}
	// A consumed request cannot be denied; the approved join spent no token use.
	_, err = fixture.Call[nodes.JoinRequest](e.F, e.acme.Admin, "joinRequests.deny", ref)
	fixture.Code(t, err, errs.InvalidState, "")
	var uses int
	if err := e.DB.Get(&uses, `SELECT uses FROM join_tokens WHERE secret_hash = $1`, auth.Hash(tok)); err != nil || uses != 0 {
		t.Fatalf("uses %d, %v", uses, err)
	}

	// Denied: the retry is PERMISSION_DENIED, naming the request.
	m2 := placeholder(t)
	r2 := fixture.Must(e.join(m2, tok))
	denied := fixture.Must(fixture.Call[nodes.JoinRequest](e.F, e.acme.Admin, "joinRequests.deny",
		map[string]any{"tenantId": "acme", "joinRequestId": r2.JoinRequestID, "reason": "not ours"}))
	if denied.State != nodes.Denied || denied.DenyReason == nil || *denied.DenyReason != "not ours" {
		t.Fatalf("denied: %+v", denied)
	}
	_, err = e.join(m2, tok)
	if fixture.Code(t, err, errs.PermissionDenied, "").Details["joinRequestId"] != r2.JoinRequestID {
		t.Fatalf("denied retry: %v", err)
	}
	// An expired pending request: the retry attests afresh (a new request).
	m3 := placeholder(t)
	r3 := fixture.Must(e.join(m3, tok))
	if _, err := e.DB.Exec(`UPDATE join_requests SET expires_at = now() - interval '1 second' WHERE join_request_id = $1`, r3.JoinRequestID); err != nil {
		t.Fatal(err)
	}
	r4 := fixture.Must(e.join(m3, tok))
	if r4.Status != nodes.Pending || r4.JoinRequestID == r3.JoinRequestID {
		t.Fatalf("after expiry: %+v", r4)
	}
	old := fixture.Must(nodes.GetJoinRequest(e.Ctx, e.DB, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: r3.JoinRequestID}))
	if old.State != nodes.Expired {
		t.Fatalf("the old request is %s", old.State)
	}
}

// The discovery attestor admits a machine the owner registered (by any of
// its ids) and defers one it does not know.
func TestDiscoveryAttestor(t *testing.T) {
	e := newEnv(t)
	tok := e.token(5)
	known := testkit.NewMachine(t)
	fixture.Must(fixture.Call[nodes.ExpectedMachine](e.F, e.acme.Admin, "machines.register",
		map[string]any{"tenantId": "acme", "poolId": e.pool, "mac": known.MAC}))
	body := known.JoinBody(tok)
	body["attestor"] = nodes.AttestorDiscovery
	if r := fixture.Must(fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", body)); r.Status != "admitted" {
		t.Fatalf("a registered machine: %+v", r)
	}
	body = testkit.NewMachine(t).JoinBody(tok)
	body["attestor"] = nodes.AttestorDiscovery
	r := fixture.Must(fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", body))
	if r.Status != nodes.Pending || len(r.Reasons) != 1 || r.Reasons[0].Code != nodes.ReasonUnknown {
		t.Fatalf("an unknown machine: %+v", r)
	}
	// A MAC that is no card's own, registered before the rule held,
	// matches no join that reports it.
	if _, err := e.DB.ExecContext(e.Ctx, `INSERT INTO expected_machines (machine_id, pool_id, mac) VALUES ('mach_legacy', $1, '00:00:00:00:00:00')`, e.pool); err != nil {
		t.Fatal(err)
	}
	zero := testkit.NewMachine(t)
	body = zero.JoinBody(tok)
	body["attestor"] = nodes.AttestorDiscovery
	body["hardware"].(map[string]any)["macs"] = []any{"00:00:00:00:00:00"}
	if r := fixture.Must(fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", body)); r.Status != nodes.Pending {
		t.Fatalf("a machine reporting the zero MAC: %+v", r)
	}
	// Another tenant cannot register machines in the pool.
	_, err := fixture.Call[nodes.ExpectedMachine](e.F, e.beta.Admin, "machines.register",
		map[string]any{"tenantId": "beta", "poolId": e.pool, "mac": "02:00:00:00:00:01"})
	fixture.Code(t, err, errs.NotFound, "")
}

// Many machines race for one token's uses: exactly maxUses are admitted,
// every other is refused for lack of uses, and no use is counted twice.
func TestConcurrentJoinsSpendEachUseOnce(t *testing.T) {
	e := newEnv(t)
	const uses, machines = 5, 16
	tok := e.token(uses)
	var wg sync.WaitGroup
	results := make([]error, machines)
	start := make(chan struct{})
	for i := 0; i < machines; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			m := testkit.NewMachine(t)
			<-start
			_, results[i] = e.join(m, tok)
		}(i)
	}
	close(start)
	wg.Wait()
	admitted := 0
	for _, err := range results {
		if err == nil {
			admitted++
			continue
		}
		if errs.CodeOf(err) != errs.Unauthenticated {
			t.Fatalf("a refused join: %v", err)
		}
	}
	var counted, nodesN int
	if err := e.DB.Get(&counted, `SELECT uses FROM join_tokens WHERE secret_hash = $1`, auth.Hash(tok)); err != nil {
		t.Fatal(err)
	}
	if err := e.DB.Get(&nodesN, `SELECT count(*) FROM nodes`); err != nil {
		t.Fatal(err)
	}
	if admitted != uses || counted != uses || nodesN != uses {
		t.Fatalf("%d admitted, %d uses counted, %d nodes; the token has %d", admitted, counted, nodesN, uses)
	}
}

// One machine's deferred join retried at once from many goroutines makes
// one join request.
func TestConcurrentDeferredJoinsMakeOneRequest(t *testing.T) {
	e := newEnv(t)
	tok := e.token(5)
	m := placeholder(t)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs_ := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := e.join(m, tok)
			if err == nil {
				ids[i] = r.JoinRequestID
			}
			errs_[i] = err
		}(i)
	}
	wg.Wait()
	for i, err := range errs_ {
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		if ids[i] != ids[0] {
			t.Fatalf("two requests for one CSR: %v", ids)
		}
	}
	var n int
	if err := e.DB.Get(&n, `SELECT count(*) FROM join_requests`); err != nil || n != 1 {
		t.Fatalf("%d join requests, %v", n, err)
	}
}

// A node is its pool owner's: the tenant the pool is offered to and any
// other tenant get NOT_FOUND, on the method surface and in the graph's
// batch reads.
func TestNodesAreVisibleToTheirOwnerOnly(t *testing.T) {
	e := newEnv(t)
	n := e.admit()
	_, err := nodes.GetNode(e.Ctx, e.DB, &nodes.NodeRefInput{TenantID: "beta", NodeID: n.NodeID})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[nodes.Node](e.F, e.beta.Admin, "nodes.get", map[string]any{"tenantId": "beta", "nodeId": n.NodeID})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = fixture.Call[nodes.Node](e.F, e.beta.Admin, "nodes.cordon", map[string]any{"tenantId": "beta", "nodeId": n.NodeID})
	fixture.Code(t, err, errs.NotFound, "")
	// acme's member reads it but may not manage it.
	fixture.Must(fixture.Call[nodes.Node](e.F, e.acme.Viewer, "nodes.get", map[string]any{"tenantId": "acme", "nodeId": n.NodeID}))
	_, err = fixture.Call[nodes.Node](e.F, e.acme.Member, "nodes.cordon", map[string]any{"tenantId": "acme", "nodeId": n.NodeID})
	fixture.Code(t, err, errs.PermissionDenied, "")
	// A viewer of beta naming acme is PERMISSION_DENIED, as for a tenant that does not exist.
	_, err = fixture.Call[nodes.Node](e.F, e.beta.Viewer, "nodes.get", map[string]any{"tenantId": "acme", "nodeId": n.NodeID})
	fixture.Code(t, err, errs.PermissionDenied, "")
	_, err = fixture.Call[nodes.Node](e.F, e.beta.Viewer, "nodes.get", map[string]any{"tenantId": "nosuch", "nodeId": n.NodeID})
	fixture.Code(t, err, errs.PermissionDenied, "")

	// Batch reads: acme's scope sees it, beta's (offered the pool) does not,
	// nor does a scope of no tenant.
	for _, c := range []struct {
		name  string
		scope authz.Scope
		want  int
	}{{"acme", authz.TenantScope("acme"), 1}, {"beta", authz.TenantScope("beta"), 0}, {"no scope", authz.Scope{}, 0}} {
		byID := fixture.Must(nodes.NodesByID(e.Ctx, e.DB, c.scope, []string{n.NodeID}))
		pages := fixture.Must(nodes.NodePagesByPool(e.Ctx, e.DB, c.scope, []string{e.pool}, "", 10))
		counts := fixture.Must(nodes.CountNodesByPool(e.Ctx, e.DB, c.scope, []string{e.pool}))
		if len(byID) != c.want || len(pages.Items) != c.want || counts[e.pool] != c.want {
			t.Fatalf("%s: %d by id, %d in the page, counted %d; want %d", c.name, len(byID), len(pages.Items), counts[e.pool], c.want)
		}
	}
}

func TestNodeUpdateRules(t *testing.T) {
	e := newEnv(t)
	n := e.admit()
	ref := nodes.NodeUpdateInput{TenantID: "acme", NodeID: n.NodeID}
	_, err := nodes.UpdateNode(e.Ctx, e.DB, &ref)
	fixture.Code(t, err, errs.InvalidInput, "name")
	for _, c := range []struct {
		labels map[string]any
		path   string
	}{
		{map[string]any{"-bad": "x"}, "labels.-bad"},
		{map[string]any{"ok": "not ok!"}, "labels.ok"},
		{map[string]any{"ok": 3}, "labels.ok"},
		{map[string]any{"example.com/" + string(make([]byte, 0)) + "zone": "a b"}, "labels.example.com/zone"},
	} {
		in := ref
		in.Labels = c.labels
		_, err := nodes.UpdateNode(e.Ctx, e.DB, &in)
		fixture.Code(t, err, errs.InvalidInput, c.path)
	}
	many := map[string]any{}
	for i := 0; i <= nodes.MaxLabels; i++ {
		many[fmt.Sprint("k", i)] = "v"
	}
	in := ref
	in.Labels = many
	_, err = nodes.UpdateNode(e.Ctx, e.DB, &in)
	fixture.Code(t, err, errs.InvalidInput, "labels")

	in = ref
	in.Name, in.Labels = fixture.Ptr("gpu-01"), map[string]any{"example.com/zone": "a", "rack": "r1"}
	up := fixture.Must(nodes.UpdateNode(e.Ctx, e.DB, &in))
	if up.Name != "gpu-01" || up.Labels["rack"] != "r1" || up.RowVersion != 2 {
		t.Fatalf("updated: %+v", up)
	}
	// expectedVersion: the current one passes, a stale one is CONFLICT
	// with the current rowVersion.
	in = ref
	in.Name, in.ExpectedVersion = fixture.Ptr("gpu-02"), fixture.Ptr(1)
	_, err = nodes.UpdateNode(e.Ctx, e.DB, &in)
	if fixture.Code(t, err, errs.Conflict, "").Details["rowVersion"] != 2 {
		t.Fatalf("conflict details: %v", err)
	}
	in.ExpectedVersion = fixture.Ptr(2)
	if up = fixture.Must(nodes.UpdateNode(e.Ctx, e.DB, &in)); up.RowVersion != 3 || up.Labels["rack"] != "r1" {
		t.Fatalf("a name change kept the labels: %+v", up)
	}
	// Another tenant's update is NOT_FOUND.
	in = nodes.NodeUpdateInput{TenantID: "beta", NodeID: n.NodeID, Name: fixture.Ptr("x")}
	_, err = nodes.UpdateNode(e.Ctx, e.DB, &in)
	fixture.Code(t, err, errs.NotFound, "")
}

// Two writers with the same expectedVersion: exactly one wins, the other
// gets CONFLICT.
func TestNodeExpectedVersionUnderRace(t *testing.T) {
	e := newEnv(t)
	n := e.admit()
	fixture.OneWins(t, 8, func(i int) error {
		_, err := fixture.Call[nodes.Node](e.F, e.acme.Admin, "nodes.update",
			map[string]any{"tenantId": "acme", "nodeId": n.NodeID, "name": fmt.Sprint("n", i), "expectedVersion": 1})
		return err
	})
	got := fixture.Must(nodes.GetNode(e.Ctx, e.DB, &nodes.NodeRefInput{TenantID: "acme", NodeID: n.NodeID}))
	if got.RowVersion != 2 {
		t.Fatalf("rowVersion %d after one write", got.RowVersion)
	}
}

func TestNodeStates(t *testing.T) {
	e := newEnv(t)
	n := e.admit()
	ch := &nodes.NodeChangeInput{TenantID: "acme", NodeID: n.NodeID}
	_, err := nodes.Uncordon(e.Ctx, e.DB, ch)
	fixture.Code(t, err, errs.InvalidState, "")
	if c := fixture.Must(nodes.Cordon(e.Ctx, e.DB, ch)); c.State != nodes.Cordoned || c.RowVersion != 2 {
		t.Fatalf("cordoned: %+v", c)
	}
	_, err = nodes.Cordon(e.Ctx, e.DB, ch)
	fixture.Code(t, err, errs.InvalidState, "")
	_, err = nodes.Uncordon(e.Ctx, e.DB, &nodes.NodeChangeInput{TenantID: "acme", NodeID: n.NodeID, ExpectedVersion: fixture.Ptr(1)})
	fixture.Code(t, err, errs.Conflict, "")
	fixture.Must(nodes.Uncordon(e.Ctx, e.DB, ch))
	// Removed: the credential stops authenticating, the node takes no
	// change, and it is listed only when asked for.
	rm := fixture.Must(nodes.RemoveNode(e.Ctx, e.DB, ch))
	if rm.State != nodes.Removed || rm.RemovedAt == nil {
		t.Fatalf("removed: %+v", rm)
	}
	_, err = auth.Authenticate(e.Ctx, e.DB, n.Credential)
	fixture.Code(t, err, errs.Unauthenticated, "")
	for _, f := range []func() error{
		func() error { _, err := nodes.Cordon(e.Ctx, e.DB, ch); return err },
		func() error { _, err := nodes.RemoveNode(e.Ctx, e.DB, ch); return err },
		func() error {
			_, err := nodes.UpdateNode(e.Ctx, e.DB, &nodes.NodeUpdateInput{TenantID: "acme", NodeID: n.NodeID, Name: fixture.Ptr("x")})
			return err
		},
	} {
		fixture.Code(t, f(), errs.InvalidState, "")
	}
	live := fixture.Must(nodes.ListNodes(e.Ctx, e.DB, &nodes.NodeListInput{TenantID: "acme", Limit: 10}))
	removed := fixture.Must(nodes.ListNodes(e.Ctx, e.DB, &nodes.NodeListInput{TenantID: "acme", State: fixture.Ptr(nodes.Removed), Limit: 10}))
	if len(live.Items) != 0 || len(removed.Items) != 1 {
		t.Fatalf("%d live, %d removed listed", len(live.Items), len(removed.Items))
	}
	// A node principal of a removed node sees nothing of it.
	p := &reqctx.Principal{ID: "x", Kind: "node", NodeID: n.NodeID}
	_, err = fixture.Call[nodes.Node](e.F, p, "nodes.get", map[string]any{"tenantId": "acme", "nodeId": n.NodeID})
	if err == nil {
		t.Fatal("a removed node's principal read its node")
	}
}

// Pages: every node once, in id order, across pages of every size; the
// last page has no cursor; filters by pool, state and labels.
func TestListNodesPages(t *testing.T) {
	e := newEnv(t)
	var all []string
	for i := 0; i < 5; i++ {
		all = append(all, e.admit().NodeID)
	}
	fixture.Must(nodes.UpdateNode(e.Ctx, e.DB, &nodes.NodeUpdateInput{TenantID: "acme", NodeID: all[2], Labels: map[string]any{"rack": "r1", "zone": "a"}}))
	fixture.Must(nodes.Cordon(e.Ctx, e.DB, &nodes.NodeChangeInput{TenantID: "acme", NodeID: all[3]}))
	for limit := 1; limit <= 6; limit++ {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			p := fixture.Must(nodes.ListNodes(e.Ctx, e.DB, &nodes.NodeListInput{TenantID: "acme", Limit: limit, Cursor: cursor}))
			if len(p.Items) > limit || pages > 5 {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Items))
			}
			for _, n := range p.Items {
				got = append(got, n.NodeID)
			}
			if p.Cursor == nil {
				break
			}
			if len(p.Items) != limit {
				t.Fatalf("limit %d: a short page with a cursor", limit)
			}
			cursor = *p.Cursor
		}
		if fmt.Sprint(got) != fmt.Sprint(sorted(all)) {
			t.Fatalf("limit %d: %v, want %v", limit, got, sorted(all))
		}
	}
	_, err := nodes.ListNodes(e.Ctx, e.DB, &nodes.NodeListInput{TenantID: "acme", Limit: 2, Cursor: "bogus"})
	fixture.Code(t, err, errs.InvalidInput, "cursor")
	count := func(in nodes.NodeListInput) int {
		in.TenantID, in.Limit = "acme", 10
		return len(fixture.Must(nodes.ListNodes(e.Ctx, e.DB, &in)).Items)
	}
	if n := count(nodes.NodeListInput{Labels: map[string]any{"rack": "r1"}}); n != 1 {
		t.Fatalf("by label: %d", n)
	}
	if n := count(nodes.NodeListInput{Labels: map[string]any{"rack": "r1", "zone": "b"}}); n != 0 {
		t.Fatalf("by two labels, one not matching: %d", n)
	}
	if n := count(nodes.NodeListInput{State: fixture.Ptr(nodes.Cordoned)}); n != 1 {
		t.Fatalf("cordoned: %d", n)
	}
	if n := count(nodes.NodeListInput{PoolID: fixture.Ptr("pool_00000000000000000000000000")}); n != 0 {
		t.Fatalf("another pool: %d", n)
	}
	if p := fixture.Must(nodes.ListNodes(e.Ctx, e.DB, &nodes.NodeListInput{TenantID: "beta", Limit: 10})); len(p.Items) != 0 {
		t.Fatalf("beta lists acme's nodes: %d", len(p.Items))
	}
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Pages of a pool's join requests (optionally in one state) and join
// tokens: each once, in id order, the last page without a cursor; the
// owner's only.
func TestJoinRequestAndTokenPages(t *testing.T) {
	e := newEnv(t)
	tok := e.token(10)
	var reqs []string
	for i := 0; i < 5; i++ {
		reqs = append(reqs, fixture.Must(e.join(placeholder(t), tok)).JoinRequestID)
	}
	fixture.Must(nodes.DenyJoinRequest(e.As(e.acme.Admin), e.DB, &nodes.DenyInput{TenantID: "acme", JoinRequestID: reqs[1]}))
	fixture.Must(nodes.ApproveJoinRequest(e.As(e.acme.Admin), e.DB, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: reqs[3]}))
	list := func(state *string, limit int) []string {
		var out []string
		cursor := ""
		for n := 0; ; n++ {
			p := fixture.Must(nodes.ListJoinRequests(e.Ctx, e.DB, &nodes.JoinRequestListInput{TenantID: "acme", PoolID: e.pool, State: state, Limit: limit, Cursor: cursor}))
			if len(p.Items) > limit || n > 10 {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Items))
			}
			for _, r := range p.Items {
				if state != nil && r.State != *state {
					t.Fatalf("state %s listed under %s", r.State, *state)
				}
				out = append(out, r.JoinRequestID)
			}
			if p.Cursor == nil {
				return out
			}
			cursor = *p.Cursor
		}
	}
	all := sorted(reqs)
	for limit := 1; limit <= 6; limit++ {
		if got := list(nil, limit); fmt.Sprint(got) != fmt.Sprint(all) {
			t.Fatalf("limit %d: %v, want %v", limit, got, all)
		}
	}
	if got := list(fixture.Ptr(nodes.Pending), 2); len(got) != 3 {
		t.Fatalf("pending: %v", got)
	}
	if got := list(fixture.Ptr(nodes.Denied), 1); fmt.Sprint(got) != fmt.Sprint([]string{reqs[1]}) {
		t.Fatalf("denied: %v", got)
	}
	_, err := nodes.ListJoinRequests(e.Ctx, e.DB, &nodes.JoinRequestListInput{TenantID: "beta", PoolID: e.pool, Limit: 10})
	fixture.Code(t, err, errs.NotFound, "")
	// The graph's pages of the pool's requests: the owner's scope only.
	for _, c := range []struct {
		scope authz.Scope
		want  int
	}{{authz.TenantScope("acme"), 5}, {authz.TenantScope("beta"), 0}, {authz.Scope{}, 0}} {
		rows := fixture.Must(nodes.JoinRequestPagesByPool(e.Ctx, e.DB, c.scope, []string{e.pool}, "", 10))
		counts := fixture.Must(nodes.CountJoinRequestsByPool(e.Ctx, e.DB, c.scope, []string{e.pool}))
		if len(rows.Items) != c.want || counts[e.pool] != c.want {
			t.Fatalf("scope %+v: %d requests, counted %d", c.scope, len(rows.Items), counts[e.pool])
		}
	}
	// ... in one state (Pool.joinRequests(state:)), as joinRequests.list
	// filters: a pending request past its time is expired in both.
	fixture.Must(e.DB.ExecContext(e.Ctx, `UPDATE join_requests SET expires_at = now() - interval '1 second' WHERE join_request_id = $1`, reqs[4]))
	for _, state := range []string{"", nodes.Pending, nodes.Approved, nodes.Denied, nodes.Expired, nodes.Consumed} {
		var want []string
		if state == "" {
			want = list(nil, 50)
		} else {
			want = list(&state, 50)
		}
		var got []string
		after := ""
		for n := 0; n < 10; n++ {
			rows := fixture.Must(nodes.JoinRequestPagesIn(state)(e.Ctx, e.DB, authz.TenantScope("acme"), []string{e.pool}, after, 1))
			for i, r := range rows.Items {
				if i < 1 {
					got = append(got, r.JoinRequestID)
					after = r.JoinRequestID
				}
				if state != "" && r.State != state {
					t.Fatalf("%s paged under %s", r.State, state)
				}
			}
			if len(rows.Items) <= 1 {
				break
			}
		}
		counts := fixture.Must(nodes.CountJoinRequestsIn(state)(e.Ctx, e.DB, authz.TenantScope("acme"), []string{e.pool}))
		if fmt.Sprint(got) != fmt.Sprint(want) || counts[e.pool] != len(want) {
			t.Fatalf("state %q: paged %v, counted %d; joinRequests.list gives %v", state, got, counts[e.pool], want)
		}
		if state == nodes.Expired && fmt.Sprint(got) != fmt.Sprint([]string{reqs[4]}) {
			t.Fatalf("expired: %v", got)
		}
	}

	// Tokens: revoked and used-up ones are listed with their state.
	created := fixture.Must(nodes.CreateJoinToken(e.Ctx, e.DB, &nodes.JoinTokenCreateInput{TenantID: "acme", PoolID: e.pool, TTLSeconds: ptr(60), MaxUses: ptr(1)}))
	fixture.Must(nodes.RevokeJoinToken(e.Ctx, e.DB, &nodes.JoinTokenRefInput{TenantID: "acme", JoinTokenID: created.JoinToken.JoinTokenID}))
	e.admit() // a token of one use, used
	states := map[string]int{}
	cursor := ""
	for n := 0; ; n++ {
		p := fixture.Must(nodes.ListJoinTokens(e.Ctx, e.DB, &nodes.JoinTokenListInput{TenantID: "acme", PoolID: e.pool, Limit: 1, Cursor: cursor}))
		for _, tk := range p.Items {
			states[tk.State]++
		}
		if p.Cursor == nil || n > 10 {
			break
		}
		cursor = *p.Cursor
	}
	if states[nodes.TokenActive] != 1 || states[nodes.TokenRevoked] != 1 || states[nodes.TokenExhausted] != 1 {
		t.Fatalf("token states %v", states)
	}
	_, err = nodes.ListJoinTokens(e.Ctx, e.DB, &nodes.JoinTokenListInput{TenantID: "beta", PoolID: e.pool, Limit: 10})
	fixture.Code(t, err, errs.NotFound, "")
}

func ptr[T any](v T) *T { return &v }

// An open join request (pending or approved) is for the join that made
// it: a join of the same CSR through another attestor gets nothing of it
// (PERMISSION_DENIED naming the request, as another TPM's join does), and
// the approval stays for the attestor that asked. A request the discovery
// attestor deferred is not consumed by a token join, nor one the token
// attestor deferred by a discovery join.
func TestApprovalIsForItsAttestor(t *testing.T) {
	e := newEnv(t)
	tok := e.token(5)
	join := func(m testkit.Machine, attestor string) (*nodes.JoinResult, error) {
		b := m.JoinBody(tok)
		b["attestor"] = attestor
		return fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", b)
	}
	refused := func(t *testing.T, err error, reqID string) {
		t.Helper()
		if got := fixture.Code(t, err, errs.PermissionDenied, ""); got.Details["joinRequestId"] != reqID {
			t.Fatalf("refusal names %v, want %s", got.Details, reqID)
		}
	}
	state := func(reqID string) *nodes.JoinRequest {
		return fixture.Must(nodes.GetJoinRequest(e.Ctx, e.DB, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: reqID}))
	}
	for _, c := range []struct {
		name         string
		machine      testkit.Machine
		asked, other string
		wantReason   string
	}{
		{"discovery then token", testkit.NewMachine(t), nodes.AttestorDiscovery, nodes.AttestorToken, nodes.ReasonUnknown},
		{"token then discovery", placeholder(t), nodes.AttestorToken, nodes.AttestorDiscovery, nodes.ReasonPlaceholder},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := fixture.Must(join(c.machine, c.asked))
			if r.Status != nodes.Pending || len(r.Reasons) == 0 || r.Reasons[0].Code != c.wantReason {
				t.Fatalf("deferred: %+v", r)
			}
			// Pending: the other attestor is refused, not told the request waits.
			_, err := join(c.machine, c.other)
			refused(t, err, r.JoinRequestID)
			fixture.Must(nodes.ApproveJoinRequest(e.As(e.acme.Admin), e.DB, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: r.JoinRequestID}))
			// Approved: the other attestor is refused and consumes nothing.
			_, err = join(c.machine, c.other)
			refused(t, err, r.JoinRequestID)
			if got := state(r.JoinRequestID); got.State != nodes.Approved || got.NodeID != nil {
				t.Fatalf("after the other attestor's join: %+v", got)
			}
			// The attestor that asked consumes it.
			a := fixture.Must(join(c.machine, c.asked))
			if a.Status != "admitted" || a.JoinRequestID != r.JoinRequestID {
				t.Fatalf("the approved join: %+v", a)
			}
			n := fixture.Must(nodes.GetNode(e.Ctx, e.DB, &nodes.NodeRefInput{TenantID: "acme", NodeID: a.NodeID}))
			if n.Attestor != c.asked {
				t.Fatalf("node attestor %s, want %s", n.Attestor, c.asked)
			}
			if got := state(r.JoinRequestID); got.State != nodes.Consumed || got.NodeID == nil || *got.NodeID != a.NodeID {
				t.Fatalf("consumed: %+v", got)
			}
		})
	}
}

// One machine joined at once through many join tokens, each call with a
// key of its own: the tenant gets one live node for it, the other calls
// CONFLICT naming that node.
func TestConcurrentJoinsOfOneMachineAdmitOne(t *testing.T) {
	e := newEnv(t)
	const calls = 16
	base := testkit.NewMachine(t)
	toks := make([]string, calls)
	machines := make([]testkit.Machine, calls)
	for i := range toks {
		toks[i] = e.token(1)
		m := testkit.NewMachine(t) // a key pair of its own
		m.SystemUUID, m.Serial, m.MAC = base.SystemUUID, base.Serial, base.MAC
		machines[i] = m
	}
	results := make([]error, calls)
	admitted := make([]string, calls)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range toks {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			r, err := e.join(machines[i], toks[i])
			if err == nil {
				admitted[i] = r.NodeID
			}
			results[i] = err
		}(i)
	}
	close(start)
	wg.Wait()
	var winners []string
	for i, err := range results {
		switch {
		case err == nil:
			winners = append(winners, admitted[i])
		case errs.CodeOf(err) != errs.Conflict:
			t.Fatalf("join %d: %v", i, err)
		}
	}
	var live int
	if err := e.DB.Get(&live, `SELECT count(*) FROM nodes WHERE state <> 'removed'`); err != nil {
		t.Fatal(err)
	}
	if len(winners) != 1 || live != 1 {
		t.Fatalf("one machine admitted as %d nodes (%d live): %v", len(winners), live, winners)
	}
}

// A node's call in flight when the node is removed is answered as a
// revoked credential's calls are: UNAUTHENTICATED. The call authenticated
// before the removal committed, and its handler then found the node
// removed: a probe's report racing nodes.remove was answered INVALID_STATE
// "node is removed" (2 runs in 4), an answer inventory.report's page does
// not list, to a daemon whose credential no longer existed. Here the
// removal commits between the authentication and the call.
func TestANodeCallInFlightAtRemovalIsUnauthenticated(t *testing.T) {
	e := newEnv(t)
	r := e.admit()
	node := fixture.Must(auth.Authenticate(e.Ctx, e.DB, r.Credential))
	report := map[string]any{"nodeId": r.NodeID, "sections": map[string]any{"gpus": []any{}}}
	if _, err := fixture.Call[inventory.Reported](e.F, node, "inventory.report", report); err != nil {
		t.Fatalf("a report before the removal: %v", err)
	}
	fixture.Must(fixture.Call[nodes.Node](e.F, e.acme.Admin, "nodes.remove", map[string]any{"tenantId": "acme", "nodeId": r.NodeID}))
	report["sections"] = map[string]any{"gpus": []any{}, "drivers": map[string]any{"nvidia": "570.86.15"}}
	_, err := fixture.Call[inventory.Reported](e.F, node, "inventory.report", report)
	fixture.Code(t, err, errs.Unauthenticated, "")
	// A refusal the removal does not explain stands: another node's id is
	// PERMISSION_DENIED for a live credential.
	other := e.admit()
	live := fixture.Must(auth.Authenticate(e.Ctx, e.DB, other.Credential))
	_, err = fixture.Call[inventory.Reported](e.F, live, "inventory.report", report)
	fixture.Code(t, err, errs.PermissionDenied, "")
}

// A join token holds at most MaxPendingRequests pending requests: a
// deferral spends no use, and a probe's token of one use queued 400
// requests in 8 s. Joins from many goroutines at once leave exactly the
// bound; a pending request's retry is still answered; a decision makes
// room again.
func TestAJoinTokenHoldsBoundedPendingRequests(t *testing.T) {
	e := newEnv(t)
	tok := e.token(1)
	machines := make([]testkit.Machine, nodes.MaxPendingRequests+12)
	for i := range machines {
		machines[i] = placeholder(t)
	}
	var (
		mu       sync.Mutex
		pending  []string
		refused  int
		next     = make(chan int)
		wg       sync.WaitGroup
		failures []error
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := e.join(machines[i], tok)
				mu.Lock()
				switch ee, _ := errs.As(err); {
				case err == nil && r.Status == nodes.Pending:
					pending = append(pending, r.JoinRequestID)
				case ee != nil && ee.Code == errs.RateLimited && ee.Details["reason"] == "pending-requests" &&
					ee.Details["limit"] == nodes.MaxPendingRequests && ee.Details["retryAfterSeconds"].(int) == 300:
					refused++
				default:
					failures = append(failures, fmt.Errorf("join %d: %+v %v", i, r, err))
				}
				mu.Unlock()
			}
		}()
	}
	for i := range machines {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(failures) > 0 || len(pending) != nodes.MaxPendingRequests || refused != 12 {
		t.Fatalf("%d pending, %d refused, failures %v", len(pending), refused, failures)
	}
	// The retry of a pending request is its request, at the bound too.
	first, firstReq := -1, ""
	for i, m := range machines {
		if r, err := e.join(m, tok); err == nil {
			if r.Status != nodes.Pending || !slices.Contains(pending, r.JoinRequestID) {
				t.Fatalf("retry: %+v", r)
			}
			first, firstReq = i, r.JoinRequestID
			break
		}
	}
	// Its denial makes room for one more; the token's use is unspent.
	fixture.Must(fixture.Call[nodes.JoinRequest](e.F, e.acme.Admin, "joinRequests.deny",
		map[string]any{"tenantId": "acme", "joinRequestId": firstReq}))
	var more int
	for i, m := range machines {
		if i == first {
			continue
		}
		if r, err := e.join(m, tok); err == nil && r.Status == nodes.Pending {
			more++
		}
	}
	// Besides the denied one, the 255 machines still pending are answered
	// their requests and one machine refused before is deferred now.
	if more != nodes.MaxPendingRequests {
		t.Fatalf("%d machines pending after a denial", more)
	}
	var uses int
	if err := e.DB.Get(&uses, `SELECT uses FROM join_tokens WHERE secret_hash = $1`, auth.Hash(tok)); err != nil || uses != 0 {
		t.Fatalf("uses %d, %v", uses, err)
	}
}
