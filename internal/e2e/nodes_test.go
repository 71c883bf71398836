package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/tpmsim"
)

func joinBody(tok string, m testkit.Machine, attestor string) map[string]any {
	b := m.JoinBody(tok)
	b["attestor"] = attestor
	return b
}

func TestJoinWithTokenAdmitsAndIssuesCertificateAndCredential(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 2)
	m := testkit.NewMachine(t)
	r := e.Must(e.Call("", "nodes/join", m.JoinBody(tok)))
	if r.Str("status") != "admitted" || r.Str("poolId") != pool || r.Str("credential") == "" {
		t.Fatalf("join: %s", r.Raw)
	}
	nodeID := r.Str("nodeId")

	// The certificate is for the CSR's key, names the node and chains to the CA.
	certBlock, _ := pem.Decode([]byte(r.Str("certificate")))
	caBlock, _ := pem.Decode([]byte(r.Str("caCertificate")))
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("certificate does not verify: %v", err)
	}
	csr, _ := pki.ParseCSR("csr", m.CSR)
	if string(csr.Request.RawSubjectPublicKeyInfo) != string(cert.RawSubjectPublicKeyInfo) || cert.Subject.CommonName != nodeID {
		t.Fatalf("certificate is not for the CSR's key and node: CN %s", cert.Subject.CommonName)
	}
	// The CA key is persisted, never returned: a second join gets the same CA.
	r2 := e.Must(e.Call("", "nodes/join", testkit.NewMachine(t).JoinBody(tok)))
	if r2.Str("caCertificate") != r.Str("caCertificate") {
		t.Fatal("a second join got another CA")
	}
	var keys int
	if err := e.DB.GetContext(context.Background(), &keys, `SELECT count(*) FROM server_secrets WHERE name LIKE 'node-ca%'`); err != nil || keys == 0 {
		t.Fatalf("CA is not persisted: %d %v", keys, err)
	}

	// The node is in the pool, ready, owned by the pool's tenant.
	n := e.Must(e.Call(admin, "nodes/get", map[string]any{"tenantId": "acme", "nodeId": nodeID}))
	if n.Str("state") != "ready" || n.Str("poolId") != pool || n.Str("attestor") != "token" || n.Str("tenantId") != "acme" {
		t.Fatalf("node: %s", n.Raw)
	}
	// The credential reports its own node's inventory and nothing else.
	cred := r.Str("credential")
	e.Must(e.Call(cred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": map[string]any{}}))
	if c := e.Call(cred, "inventory/report", map[string]any{"nodeId": r2.Str("nodeId"), "sections": map[string]any{}}).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("report for another node: %s", c)
	}
	for _, call := range []struct {
		method string
		body   map[string]any
	}{
		{"nodes/get", map[string]any{"tenantId": "acme", "nodeId": nodeID}},
		{"inventory/get", map[string]any{"tenantId": "acme", "nodeId": nodeID}},
		{"pools/list", map[string]any{"tenantId": "acme"}},
		{"nodes/cordon", map[string]any{"tenantId": "acme", "nodeId": nodeID}},
	} {
		if c := e.Call(cred, call.method, call.body).Code(); c != "PERMISSION_DENIED" {
			t.Fatalf("node credential on %s: %s", call.method, c)
		}
	}
	// A tenant token cannot report inventory.
	if c := e.Call(admin, "inventory/report", map[string]any{"nodeId": nodeID, "sections": map[string]any{}}).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("admin token on inventory.report: %s", c)
	}
	// The join token had two uses: a third join is refused.
	if c := e.Call("", "nodes/join", testkit.NewMachine(t).JoinBody(tok)).Code(); c != "UNAUTHENTICATED" {
		t.Fatalf("third join on a 2-use token: %s", c)
	}
	// The same key pair cannot join twice: the conflict names the
	// tenant's node (it named nothing).
	tok2 := e.JoinToken(admin, "acme", pool, 5)
	if r := e.Call("", "nodes/join", m.JoinBody(tok2)); r.Code() != "CONFLICT" || r.Details()["nodeId"] != nodeID {
		t.Fatalf("second join with the same CSR: %s", r.Raw)
	}
	// Keys are one node's on the whole platform, but another tenant's
	// join with the key is told nothing of the node that holds it.
	beta, _, _ := e.Tenant("beta")
	betaTok := e.JoinToken(beta, "beta", e.Pool(beta, "beta", "gpu-b"), 5)
	if r := e.Call("", "nodes/join", m.JoinBody(betaTok)); r.Code() != "CONFLICT" || len(r.Details()) != 0 || strings.Contains(string(r.Raw), nodeID) {
		t.Fatalf("another tenant's join with the same CSR: %s", r.Raw)
	}
}

// An approval lets a node into its pool: in an archived pool it is
// INVALID_STATE, as the join would be (it answered 200, and the join it
// approved was then refused every time); a denial still passes.
func TestApprovalInAnArchivedPool(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	pending := func() string {
		b := testkit.NewMachine(t).JoinBody(tok)
		b["hardware"] = map[string]any{"systemUuid": "00000000-0000-0000-0000-000000000000", "serial": "To Be Filled By O.E.M."}
		r := e.Must(e.Call("", "nodes/join", b))
		if r.Str("status") != "pending" {
			t.Fatalf("join: %s", r.Raw)
		}
		return r.Str("joinRequestId")
	}
	a, d := pending(), pending()
	e.Must(e.Call(admin, "pools/archive", map[string]any{"tenantId": "acme", "poolId": pool}))
	r := e.Call(admin, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": a})
	if r.Code() != "INVALID_STATE" || r.Details()["state"] != "archived" {
		t.Fatalf("approve in an archived pool: %d %s", r.Status, r.Raw)
	}
	if g := e.Must(e.Call(admin, "joinRequests/get", map[string]any{"tenantId": "acme", "joinRequestId": a})); g.Str("state") != "pending" {
		t.Fatalf("the refused approval changed the request: %s", g.Raw)
	}
	if g := e.Must(e.Call(admin, "joinRequests/deny", map[string]any{"tenantId": "acme", "joinRequestId": d})); g.Str("state") != "denied" {
		t.Fatalf("deny in an archived pool: %s", g.Raw)
	}
	// another tenant's id is still NOT_FOUND, not the pool's state
	other, _, _ := e.Tenant("other")
	expect(t, e.Call(other, "joinRequests/approve", map[string]any{"tenantId": "other", "joinRequestId": a}), "NOT_FOUND", anyPath)
}

// nodes.join's credential is the join token in its input: an
// Authorization header beside it is not read. A daemon whose node was
// removed re-joins still sending the node's revoked credential (or any
// stale header): it was refused 401, and each refusal spent the address's
// failed-authentication budget until a valid join token was 429.
func TestJoinIgnoresAnAuthorizationHeader(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, cred := e.Node(admin, "acme", pool)
	e.Must(e.Call(admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": nodeID}))
	tok := e.JoinToken(admin, "acme", pool, 40)
	for i, header := range []string{cred, "bcn_stale", "bco_nosuch", "not a token at all"} {
		for j := 0; j < 10; j++ {
			method := "nodes/join"
			if j%2 == 1 {
				method = "nodes/%6aoin" // the same path, escaped (the header was read there)
			}
			r := e.Call(header, method, testkit.NewMachine(t).JoinBody(tok))
			if r.Status != 200 || r.Str("status") != "admitted" {
				t.Fatalf("join %d with Authorization %d beside a valid join token: %d %s", j, i, r.Status, r.Raw)
			}
		}
	}
}

func TestJoinTokenRules(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	other, _, _ := e.Tenant("other")
	pool := e.Pool(admin, "acme", "gpu-a")

	c := e.Must(e.Call(admin, "joinTokens/create", map[string]any{"tenantId": "acme", "poolId": pool}))
	jt := c.Body["joinToken"].(map[string]any)
	if jt["maxUses"].(float64) != 1 || jt["uses"].(float64) != 0 || jt["state"] != "active" || c.Str("secret") == "" {
		t.Fatalf("defaults: %s", c.Raw)
	}
	var hashed int
	_ = e.DB.GetContext(context.Background(), &hashed, `SELECT count(*) FROM join_tokens WHERE secret_hash = sha256(convert_to($1, 'UTF8'))`, c.Str("secret"))
	if hashed != 1 {
		t.Fatal("the join token secret is not stored as its hash")
	}
	for _, tc := range []struct {
		body map[string]any
		path string
	}{
		{map[string]any{"tenantId": "acme", "poolId": pool, "ttlSeconds": 59}, "ttlSeconds"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "ttlSeconds": 2592001}, "ttlSeconds"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "maxUses": 0}, "maxUses"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "maxUses": 10001}, "maxUses"},
		{map[string]any{"tenantId": "acme", "poolId": "pool_x"}, "poolId"},
	} {
		r := e.Call(admin, "joinTokens/create", tc.body)
		if r.Code() != "INVALID_INPUT" || r.Path() != tc.path {
			t.Fatalf("%v: %s %s", tc.body, r.Code(), r.Path())
		}
	}
	if c := e.Call(member, "joinTokens/create", map[string]any{"tenantId": "acme", "poolId": pool}).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("member creates a join token: %s", c)
	}
	if r := e.Must(e.Call(viewer, "joinTokens/list", map[string]any{"tenantId": "acme", "poolId": pool})); len(r.Body["items"].([]any)) != 1 {
		t.Fatalf("list: %s", r.Raw)
	}
	// Another tenant's pool is NOT_FOUND, offered or not.
	if c := e.Call(other, "joinTokens/create", map[string]any{"tenantId": "other", "poolId": pool}).Code(); c != "NOT_FOUND" {
		t.Fatalf("other tenant: %s", c)
	}
	e.Must(e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "other", "quota": map[string]any{"gpus": 8, "instances": 2}}))
	if c := e.Call(other, "joinTokens/create", map[string]any{"tenantId": "other", "poolId": pool}).Code(); c != "NOT_FOUND" {
		t.Fatalf("offered tenant creates a join token: %s", c)
	}
	if c := e.Call(other, "joinTokens/list", map[string]any{"tenantId": "other", "poolId": pool}).Code(); c != "NOT_FOUND" {
		t.Fatalf("offered tenant lists join tokens: %s", c)
	}

	// Revoked tokens admit nothing; revoking twice is INVALID_STATE.
	id := jt["joinTokenId"].(string)
	rv := e.Must(e.Call(admin, "joinTokens/revoke", map[string]any{"tenantId": "acme", "joinTokenId": id}))
	if rv.Str("state") != "revoked" {
		t.Fatalf("revoke: %s", rv.Raw)
	}
	if c := e.Call(admin, "joinTokens/revoke", map[string]any{"tenantId": "acme", "joinTokenId": id}).Code(); c != "INVALID_STATE" {
		t.Fatalf("revoke twice: %s", c)
	}
	if c := e.Call(other, "joinTokens/revoke", map[string]any{"tenantId": "other", "joinTokenId": id}).Code(); c != "NOT_FOUND" {
		t.Fatalf("other tenant revokes: %s", c)
	}
	if c := e.Call(admin, "joinTokens/revoke", map[string]any{"tenantId": "acme", "joinTokenId": "jtok_01jd0000000000000000000000"}).Code(); c != "NOT_FOUND" {
		t.Fatalf("unknown token: %s", c)
	}
	if c := e.Call("", "nodes/join", testkit.NewMachine(t).JoinBody(c.Str("secret"))).Code(); c != "UNAUTHENTICATED" {
		t.Fatalf("join with a revoked token: %s", c)
	}
	if c := e.Call("", "nodes/join", testkit.NewMachine(t).JoinBody("bcj_nope")).Code(); c != "UNAUTHENTICATED" {
		t.Fatalf("join with an unknown token: %s", c)
	}
	// An expired token admits nothing.
	tok := e.JoinToken(admin, "acme", pool, 1)
	if _, err := e.DB.ExecContext(context.Background(), `UPDATE join_tokens SET expires_at = now() - interval '1 second' WHERE secret_hash = sha256(convert_to($1, 'UTF8'))`, tok); err != nil {
		t.Fatal(err)
	}
	if c := e.Call("", "nodes/join", testkit.NewMachine(t).JoinBody(tok)).Code(); c != "UNAUTHENTICATED" {
		t.Fatalf("join with an expired token: %s", c)
	}
	// An archived pool takes no joins and no join tokens.
	tok = e.JoinToken(admin, "acme", pool, 1)
	e.Must(e.Call(admin, "pools/archive", map[string]any{"tenantId": "acme", "poolId": pool}))
	if c := e.Call("", "nodes/join", testkit.NewMachine(t).JoinBody(tok)).Code(); c != "INVALID_STATE" {
		t.Fatalf("join an archived pool: %s", c)
	}
	if c := e.Call(admin, "joinTokens/create", map[string]any{"tenantId": "acme", "poolId": pool}).Code(); c != "INVALID_STATE" {
		t.Fatalf("join token for an archived pool: %s", c)
	}
}

func TestJoinInputIsValidated(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	m := testkit.NewMachine(t)
	_, ecPub, _ := pki.NewEK()
	for _, tc := range []struct {
		name string
		edit func(b map[string]any)
		path string
	}{
		{"bad csr", func(b map[string]any) {
			b["csr"] = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
		}, "csr"},
		{"not pem", func(b map[string]any) { b["csr"] = "hello" }, "csr"},
		{"key not csr", func(b map[string]any) { b["csr"] = ecPub }, "csr"},
		{"attestor", func(b map[string]any) { b["attestor"] = "magic" }, "attestor"},
		{"uuid", func(b map[string]any) { b["hardware"].(map[string]any)["systemUuid"] = "not-a-uuid" }, "hardware.systemUuid"},
		{"mac", func(b map[string]any) { b["hardware"].(map[string]any)["macs"] = []string{"zz:zz"} }, "hardware.macs[0]"},
		{"dup mac", func(b map[string]any) {
			b["hardware"].(map[string]any)["macs"] = []string{"02:00:00:00:00:01", "02:00:00:00:00:01"}
		}, "hardware.macs[1]"},
		{"missing serial", func(b map[string]any) { delete(b["hardware"].(map[string]any), "serial") }, "hardware.serial"},
		{"unknown field", func(b map[string]any) { b["extra"] = 1 }, "extra"},
		{"tpm without evidence", func(b map[string]any) { b["attestor"] = "tpm" }, "evidence.ekPublicKey"},
		{"tpm bad key", func(b map[string]any) {
			b["attestor"] = "tpm"
			b["evidence"] = map[string]any{"ekPublicKey": "junk"}
		}, "evidence.ekPublicKey"},
	} {
		b := m.JoinBody(tok)
		tc.edit(b)
		r := e.Call("", "nodes/join", b)
		if r.Code() != "INVALID_INPUT" || r.Path() != tc.path {
			t.Fatalf("%s: %d %s %s: %s", tc.name, r.Status, r.Code(), r.Path(), r.Raw)
		}
	}
}

func TestPlaceholderHardwareIsDeferredAndApprovalAdmitsExactlyOnce(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	other, _, _ := e.Tenant("other")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)

	for _, hw := range []map[string]any{
		{"systemUuid": "00000000-0000-0000-0000-000000000000", "serial": "J8KX3T2"},
		{"systemUuid": "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "serial": "J8KX3T2"},
		{"systemUuid": "03000200-0400-0500-0006-000700080009", "serial": "J8KX3T2"},
		{"systemUuid": "4c4c4544-0046-4310-8057-b4c04f4a3333", "serial": "To Be Filled By O.E.M."},
		{"systemUuid": "4c4c4544-0046-4310-8057-b4c04f4a3334", "serial": "Default string"},
		{"systemUuid": "4c4c4544-0046-4310-8057-b4c04f4a3335", "serial": "0123456789"},
	} {
		m := testkit.NewMachine(t)
		b := m.JoinBody(tok)
		b["hardware"] = hw
		r := e.Must(e.Call("", "nodes/join", b))
		if r.Str("status") != "pending" || r.Str("joinRequestId") == "" || r.Str("nodeId") != "" || r.Str("credential") != "" {
			t.Fatalf("%v: %s", hw, r.Raw)
		}
		reasons := r.Body["reasons"].([]any)
		if len(reasons) != 1 || reasons[0].(map[string]any)["code"] != "placeholder-hardware" {
			t.Fatalf("%v: reasons %v", hw, reasons)
		}
	}

	m := testkit.NewMachine(t)
	b := m.JoinBody(tok)
	b["hardware"] = map[string]any{"systemUuid": "00000000000000000000000000000000", "serial": "To Be Filled By O.E.M.", "macs": []string{m.MAC}}
	first := e.Must(e.Call("", "nodes/join", b))
	reqID := first.Str("joinRequestId")
	// Retrying before a decision returns the same pending request.
	again := e.Must(e.Call("", "nodes/join", b))
	if again.Str("status") != "pending" || again.Str("joinRequestId") != reqID {
		t.Fatalf("retry while pending: %s", again.Raw)
	}
	g := e.Must(e.Call(viewer, "joinRequests/get", map[string]any{"tenantId": "acme", "joinRequestId": reqID}))
	csr, _ := pki.ParseCSR("csr", m.CSR)
	if g.Str("state") != "pending" || g.Str("csrFingerprint") != csr.Fingerprint || g.Str("poolId") != pool || g.Str("attestor") != "token" {
		t.Fatalf("request: %s", g.Raw)
	}
	lr := e.Must(e.Call(admin, "joinRequests/list", map[string]any{"tenantId": "acme", "poolId": pool, "state": "pending", "limit": 3}))
	if len(lr.Body["items"].([]any)) != 3 || lr.Body["cursor"] == nil {
		t.Fatalf("list: %s", lr.Raw)
	}
	lr2 := e.Must(e.Call(admin, "joinRequests/list", map[string]any{"tenantId": "acme", "poolId": pool, "state": "pending", "limit": 3, "cursor": lr.Body["cursor"]}))
	if n := len(lr2.Body["items"].([]any)); n != 3 || lr2.Body["cursor"] == nil {
		t.Fatalf("list page 2: %d %s", n, lr2.Raw)
	}
	lr3 := e.Must(e.Call(admin, "joinRequests/list", map[string]any{"tenantId": "acme", "poolId": pool, "state": "pending", "limit": 3, "cursor": lr2.Body["cursor"]}))
	if n := len(lr3.Body["items"].([]any)); n != 1 || lr3.Body["cursor"] != nil {
		t.Fatalf("list page 3: %d %s", n, lr3.Raw)
	}

	// Who may decide: the owner's admins; others get PERMISSION_DENIED or NOT_FOUND.
	ref := map[string]any{"tenantId": "acme", "joinRequestId": reqID}
	if c := e.Call(member, "joinRequests/approve", ref).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("member approves: %s", c)
	}
	if c := e.Call(other, "joinRequests/approve", map[string]any{"tenantId": "other", "joinRequestId": reqID}).Code(); c != "NOT_FOUND" {
		t.Fatalf("other tenant approves: %s", c)
	}
	if c := e.Call(other, "joinRequests/get", map[string]any{"tenantId": "other", "joinRequestId": reqID}).Code(); c != "NOT_FOUND" {
		t.Fatalf("other tenant reads: %s", c)
	}
	if c := e.Call(admin, "joinRequests/get", map[string]any{"tenantId": "acme", "joinRequestId": "jreq_01jd0000000000000000000000"}).Code(); c != "NOT_FOUND" {
		t.Fatalf("unknown request: %s", c)
	}
	ap := e.Must(e.Call(admin, "joinRequests/approve", ref))
	if ap.Str("state") != "approved" || ap.Str("decidedBy") == "" {
		t.Fatalf("approve: %s", ap.Raw)
	}
	if c := e.Call(admin, "joinRequests/approve", ref).Code(); c != "INVALID_STATE" {
		t.Fatalf("approve twice: %s", c)
	}

	// A retry with another CSR does not consume the approval.
	m2 := testkit.NewMachine(t)
	b2 := m2.JoinBody(tok)
	b2["hardware"] = b["hardware"]
	if r := e.Must(e.Call("", "nodes/join", b2)); r.Str("status") != "pending" || r.Str("joinRequestId") == reqID {
		t.Fatalf("retry with another CSR: %s", r.Raw)
	}
	// Concurrent retries with the same CSR: exactly one is admitted.
	var wg sync.WaitGroup
	results := make([]testkit.Resp, 6)
	for i := range results {
		wg.Add(1)
		go func(i int) { defer wg.Done(); results[i] = e.Call("", "nodes/join", b) }(i)
	}
	wg.Wait()
	admitted, conflicts := 0, 0
	var nodeID string
	for _, r := range results {
		switch {
		case r.Status == 200 && r.Str("status") == "admitted":
			admitted++
			nodeID = r.Str("nodeId")
		case r.Code() == "CONFLICT":
			conflicts++
		default:
			t.Fatalf("concurrent retry: %s", r.Raw)
		}
	}
	if admitted != 1 || conflicts != len(results)-1 {
		t.Fatalf("admitted %d, conflicts %d", admitted, conflicts)
	}
	g = e.Must(e.Call(admin, "joinRequests/get", ref))
	if g.Str("state") != "consumed" || g.Str("nodeId") != nodeID {
		t.Fatalf("after admission: %s", g.Raw)
	}
	n := e.Must(e.Call(admin, "nodes/get", map[string]any{"tenantId": "acme", "nodeId": nodeID}))
	if n.Str("joinRequestId") != reqID {
		t.Fatalf("node: %s", n.Raw)
	}
	if c := e.Call(admin, "joinRequests/deny", ref).Code(); c != "INVALID_STATE" {
		t.Fatalf("deny a consumed request: %s", c)
	}
}

func TestDeniedAndExpiredRequestsAdmitNothing(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	placeholder := func(m testkit.Machine) map[string]any {
		b := m.JoinBody(tok)
		b["hardware"] = map[string]any{"systemUuid": "00000000-0000-0000-0000-000000000000", "serial": "Default string"}
		return b
	}
	// Denied: the retry with the same CSR is refused.
	m := testkit.NewMachine(t)
	id := e.Must(e.Call("", "nodes/join", placeholder(m))).Str("joinRequestId")
	d := e.Must(e.Call(admin, "joinRequests/deny", map[string]any{"tenantId": "acme", "joinRequestId": id}))
	if d.Str("state") != "denied" {
		t.Fatalf("deny: %s", d.Raw)
	}
	if c := e.Call("", "nodes/join", placeholder(m)).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("retry after deny: %s", c)
	}
	if c := e.Call(admin, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": id}).Code(); c != "INVALID_STATE" {
		t.Fatalf("approve a denied request: %s", c)
	}
	// Expired: an approval the machine never used reads as expired and
	// admits nothing; the retry is deferred into a new request.
	m2 := testkit.NewMachine(t)
	id2 := e.Must(e.Call("", "nodes/join", placeholder(m2))).Str("joinRequestId")
	e.Must(e.Call(admin, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": id2}))
	if _, err := e.DB.ExecContext(context.Background(), `UPDATE join_requests SET expires_at = now() - interval '1 second' WHERE join_request_id = $1`, id2); err != nil {
		t.Fatal(err)
	}
	if s := e.Must(e.Call(admin, "joinRequests/get", map[string]any{"tenantId": "acme", "joinRequestId": id2})).Str("state"); s != "expired" {
		t.Fatalf("state: %s", s)
	}
	r := e.Must(e.Call("", "nodes/join", placeholder(m2)))
	if r.Str("status") != "pending" || r.Str("joinRequestId") == id2 {
		t.Fatalf("retry after expiry: %s", r.Raw)
	}
	if c := e.Call(admin, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": id2}).Code(); c != "INVALID_STATE" {
		t.Fatalf("approve an expired request: %s", c)
	}
	lr := e.Must(e.Call(admin, "joinRequests/list", map[string]any{"tenantId": "acme", "poolId": pool, "state": "expired"}))
	if len(lr.Body["items"].([]any)) != 1 {
		t.Fatalf("expired list: %s", lr.Raw)
	}
}

func TestDiscoveryAttestor(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)

	// Unknown machine: deferred.
	m := testkit.NewMachine(t)
	r := e.Must(e.Call("", "nodes/join", joinBody(tok, m, "discovery")))
	if r.Str("status") != "pending" || r.Body["reasons"].([]any)[0].(map[string]any)["code"] != "unknown-machine" {
		t.Fatalf("unknown machine: %s", r.Raw)
	}
	// Known by serial, UUID or MAC: admitted.
	for i, field := range []string{"serial", "systemUuid", "mac"} {
		m := testkit.NewMachine(t)
		body := map[string]any{"tenantId": "acme", "poolId": pool}
		switch field {
		case "serial":
			body["serial"] = m.Serial
		case "systemUuid":
			body["systemUuid"] = m.SystemUUID
		case "mac":
			body["mac"] = m.MAC
		}
		reg := e.Must(e.Call(admin, "machines/register", body))
		if reg.Str("machineId") == "" {
			t.Fatalf("register: %s", reg.Raw)
		}
		r := e.Must(e.Call("", "nodes/join", joinBody(tok, m, "discovery")))
		if r.Str("status") != "admitted" {
			t.Fatalf("known by %s (%d): %s", field, i, r.Raw)
		}
	}
	// A known machine with placeholder ids is still deferred.
	pm := testkit.NewMachine(t)
	e.Must(e.Call(admin, "machines/register", map[string]any{"tenantId": "acme", "poolId": pool, "mac": pm.MAC}))
	pb := joinBody(tok, pm, "discovery")
	pb["hardware"].(map[string]any)["serial"] = "To Be Filled By O.E.M."
	if r := e.Must(e.Call("", "nodes/join", pb)); r.Str("status") != "pending" {
		t.Fatalf("placeholder serial: %s", r.Raw)
	}
	// Registration rules.
	for _, tc := range []struct {
		body map[string]any
		path string
	}{
		{map[string]any{"tenantId": "acme", "poolId": pool}, "systemUuid"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "serial": "Default string"}, "serial"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "systemUuid": "00000000-0000-0000-0000-000000000000"}, "systemUuid"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "mac": "nope"}, "mac"},
	} {
		r := e.Call(admin, "machines/register", tc.body)
		if r.Code() != "INVALID_INPUT" || r.Path() != tc.path {
			t.Fatalf("%v: %s %s", tc.body, r.Code(), r.Path())
		}
	}
	if c := e.Call(member, "machines/register", map[string]any{"tenantId": "acme", "poolId": pool, "serial": "X1"}).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("member registers: %s", c)
	}
	l := e.Must(e.Call(member, "machines/list", map[string]any{"tenantId": "acme", "poolId": pool}))
	items := l.Body["items"].([]any)
	if len(items) != 4 {
		t.Fatalf("machines: %s", l.Raw)
	}
	id := items[0].(map[string]any)["machineId"].(string)
	e.Must(e.Call(admin, "machines/forget", map[string]any{"tenantId": "acme", "machineId": id}))
	if c := e.Call(admin, "machines/forget", map[string]any{"tenantId": "acme", "machineId": id}).Code(); c != "NOT_FOUND" {
		t.Fatalf("forget twice: %s", c)
	}
}

// The allow-list decides after the TPM proved possession: on no list,
// deferred; allowed by public key, admitted; disallowed, deferred again.
func TestTPMAttestor(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	e.Tenant("other")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	m := newTPMMachine(t, tpmsim.Open(t, 71), "rsa", tpmsim.AKTemplateRSA)
	ek := m.ek.PEM()
	hash, _ := pki.EKHash("ek", ek)

	r := e.Must(m.exchange(t, e, tok))
	if r.Str("status") != "pending" || r.Body["reasons"].([]any)[0].(map[string]any)["code"] != "ek-not-allowed" {
		t.Fatalf("EK on no allow-list: %s", r.Raw)
	}
	g := e.Must(e.Call(admin, "joinRequests/get", map[string]any{"tenantId": "acme", "joinRequestId": r.Str("joinRequestId")}))
	if g.Str("ekHash") != hash || g.Str("attestor") != "tpm" || g.Body["ekProven"] != true {
		t.Fatalf("request: %s", g.Raw)
	}
	// Allowed by public key: the same TPM's next join is admitted.
	a := e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": ek, "description": "rack 4"}))
	if a.Str("ekHash") != hash || a.Str("kind") != "ek" || a.Body["caCertificate"] != nil {
		t.Fatalf("allow: %s", a.Raw)
	}
	if c := e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash}).Code(); c != "CONFLICT" {
		t.Fatalf("allow twice: %s", c)
	}
	// the conflict names the field sent (it named ekHash beside an ekPublicKey)
	expect(t, e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": ek}), "CONFLICT", "ekPublicKey")
	expect(t, e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash}), "CONFLICT", "ekHash")
	// The pending request stays pending; a fresh key pair attests anew.
	m.Machine = testkit.NewMachine(t)
	adm := e.Must(m.exchange(t, e, tok))
	if adm.Str("status") != "admitted" {
		t.Fatalf("allowed EK: %s", adm.Raw)
	}
	// One TPM is one live node of the tenant: while it lives, the same TPM
	// is CONFLICT, deferred or not; removed, the TPM joins (or is deferred)
	// again.
	m.Machine = testkit.NewMachine(t)
	if r := m.exchange(t, e, tok); r.Code() != "CONFLICT" || r.Body["error"].(map[string]any)["details"].(map[string]any)["nodeId"] != adm.Str("nodeId") {
		t.Fatalf("the TPM of a live node: %s", r.Raw)
	}
	e.Must(e.Call(admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": adm.Str("nodeId")}))
	for _, tc := range []struct {
		body map[string]any
		path string
	}{
		{map[string]any{"tenantId": "acme", "poolId": pool}, "ekHash"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": "ABC"}, "ekHash"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash, "ekPublicKey": ek}, "ekPublicKey"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash, "caCertificate": "x"}, "caCertificate"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": "junk"}, "ekPublicKey"},
		{map[string]any{"tenantId": "acme", "poolId": pool, "caCertificate": ek}, "caCertificate"},
	} {
		r := e.Call(admin, "tpmKeys/allow", tc.body)
		if r.Code() != "INVALID_INPUT" || r.Path() != tc.path {
			t.Fatalf("%v: %s %s", tc.body, r.Code(), r.Path())
		}
	}
	if l := e.Must(e.Call(admin, "tpmKeys/list", map[string]any{"tenantId": "acme", "poolId": pool})); len(l.Body["items"].([]any)) != 1 {
		t.Fatalf("list: %s", l.Raw)
	}
	e.Must(e.Call(admin, "tpmKeys/disallow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash}))
	if c := e.Call(admin, "tpmKeys/disallow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash}).Code(); c != "NOT_FOUND" {
		t.Fatalf("disallow twice: %s", c)
	}
	m.Machine = testkit.NewMachine(t)
	if r := e.Must(m.exchange(t, e, tok)); r.Str("status") != "pending" {
		t.Fatalf("after disallow: %s", r.Raw)
	}
}

func TestNodeLifecycleAndListing(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	other, _, _ := e.Tenant("other")
	poolA := e.Pool(admin, "acme", "gpu-a")
	poolB := e.Pool(admin, "acme", "gpu-b")
	var inA []string
	for i := 0; i < 3; i++ {
		id, _ := e.Node(admin, "acme", poolA)
		inA = append(inA, id)
	}
	nb, nbCred := e.Node(admin, "acme", poolB)

	list := func(tok string, body map[string]any) []any {
		t.Helper()
		body["tenantId"] = "acme"
		return e.Must(e.Call(tok, "nodes/list", body)).Body["items"].([]any)
	}
	if n := len(list(viewer, map[string]any{})); n != 4 {
		t.Fatalf("all: %d", n)
	}
	if n := len(list(viewer, map[string]any{"poolId": poolA})); n != 3 {
		t.Fatalf("pool A: %d", n)
	}
	// update: name and labels; expectedVersion; label rules.
	u := e.Must(e.Call(admin, "nodes/update", map[string]any{"tenantId": "acme", "nodeId": inA[0], "name": "gpu-a-01",
		"labels": map[string]any{"rack": "r4", "topology.bettercompute.io/zone": "a"}, "expectedVersion": 1}))
	if u.Str("name") != "gpu-a-01" || u.Body["rowVersion"].(float64) != 2 {
		t.Fatalf("update: %s", u.Raw)
	}
	if c := e.Call(admin, "nodes/update", map[string]any{"tenantId": "acme", "nodeId": inA[0], "name": "x", "expectedVersion": 1}).Code(); c != "CONFLICT" {
		t.Fatalf("stale expectedVersion: %s", c)
	}
	// The same values again (labels in another order) change nothing: the
	// same rowVersion, so another writer's expectedVersion still holds, and
	// no node.updated event for the dashboards.
	events := func() int {
		var n int
		if err := e.DB.Get(&n, `SELECT (SELECT count(*) FROM events WHERE resource_id = $1) + (SELECT count(*) FROM event_inbox WHERE resource_id = $1)`, inA[0]); err != nil {
			t.Fatal(err)
		}
		return n
	}
	had := events()
	for _, body := range []map[string]any{
		{"name": "gpu-a-01", "labels": map[string]any{"topology.bettercompute.io/zone": "a", "rack": "r4"}, "expectedVersion": 2},
		{"name": "gpu-a-01"},
		{"labels": map[string]any{"rack": "r4", "topology.bettercompute.io/zone": "a"}},
	} {
		body["tenantId"], body["nodeId"] = "acme", inA[0]
		same := e.Must(e.Call(admin, "nodes/update", body))
		if same.Str("name") != "gpu-a-01" || same.Body["rowVersion"].(float64) != 2 || same.Str("updatedAt") != u.Str("updatedAt") {
			t.Fatalf("update with the same values: %s, was %s", same.Raw, u.Raw)
		}
	}
	if n := events(); n != had {
		t.Fatalf("updates with the same values wrote %d events", n-had)
	}
	for _, tc := range []struct {
		body map[string]any
		path string
	}{
		{map[string]any{}, "name"},
		{map[string]any{"labels": map[string]any{"bad key!": "v"}}, "labels.bad key!"},
		{map[string]any{"labels": map[string]any{"k": "bad value!"}}, "labels.k"},
		{map[string]any{"labels": map[string]any{"k": 1}}, "labels.k"},
		{map[string]any{"name": " padded"}, "name"},
	} {
		tc.body["tenantId"], tc.body["nodeId"] = "acme", inA[1]
		r := e.Call(admin, "nodes/update", tc.body)
		if r.Code() != "INVALID_INPUT" || r.Path() != tc.path {
			t.Fatalf("%v: %s %s %s", tc.body, r.Code(), r.Path(), r.Raw)
		}
	}
	if n := len(list(viewer, map[string]any{"labels": map[string]any{"rack": "r4"}})); n != 1 {
		t.Fatalf("by label: %d", n)
	}
	if n := len(list(viewer, map[string]any{"labels": map[string]any{"rack": "r5"}})); n != 0 {
		t.Fatalf("by other label: %d", n)
	}
	// cordon / uncordon / remove and their states.
	ref := map[string]any{"tenantId": "acme", "nodeId": inA[1]}
	if c := e.Call(member, "nodes/cordon", ref).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("member cordons: %s", c)
	}
	if s := e.Must(e.Call(admin, "nodes/cordon", ref)).Str("state"); s != "cordoned" {
		t.Fatalf("cordon: %s", s)
	}
	if c := e.Call(admin, "nodes/cordon", ref).Code(); c != "INVALID_STATE" {
		t.Fatalf("cordon twice: %s", c)
	}
	if n := len(list(viewer, map[string]any{"state": "cordoned"})); n != 1 {
		t.Fatalf("cordoned: %d", n)
	}
	if s := e.Must(e.Call(admin, "nodes/uncordon", ref)).Str("state"); s != "ready" {
		t.Fatalf("uncordon: %s", s)
	}
	if c := e.Call(admin, "nodes/uncordon", ref).Code(); c != "INVALID_STATE" {
		t.Fatalf("uncordon a ready node: %s", c)
	}
	rm := e.Must(e.Call(admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": nb}))
	if rm.Str("state") != "removed" || rm.Body["removedAt"] == nil {
		t.Fatalf("remove: %s", rm.Raw)
	}
	if c := e.Call(admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": nb}).Code(); c != "INVALID_STATE" {
		t.Fatalf("remove twice: %s", c)
	}
	if c := e.Call(admin, "nodes/cordon", map[string]any{"tenantId": "acme", "nodeId": nb}).Code(); c != "INVALID_STATE" {
		t.Fatalf("cordon a removed node: %s", c)
	}
	// The removed node's credential is revoked in the same transaction.
	if c := e.Call(nbCred, "inventory/report", map[string]any{"nodeId": nb, "sections": map[string]any{}}).Code(); c != "UNAUTHENTICATED" {
		t.Fatalf("removed node reports: %s", c)
	}
	if n := len(list(viewer, map[string]any{})); n != 3 {
		t.Fatalf("removed nodes are listed by default: %d", n)
	}
	if n := len(list(viewer, map[string]any{"state": "removed"})); n != 1 {
		t.Fatalf("removed: %d", n)
	}
	// Paging.
	p1 := e.Must(e.Call(viewer, "nodes/list", map[string]any{"tenantId": "acme", "limit": 2}))
	if len(p1.Body["items"].([]any)) != 2 || p1.Body["cursor"] == nil {
		t.Fatalf("page 1: %s", p1.Raw)
	}
	p2 := e.Must(e.Call(viewer, "nodes/list", map[string]any{"tenantId": "acme", "limit": 2, "cursor": p1.Body["cursor"]}))
	if len(p2.Body["items"].([]any)) != 1 || p2.Body["cursor"] != nil {
		t.Fatalf("page 2: %s", p2.Raw)
	}
	for _, tc := range []struct {
		body map[string]any
		path string
	}{
		{map[string]any{"tenantId": "acme", "limit": 0}, "limit"},
		{map[string]any{"tenantId": "acme", "limit": 201}, "limit"},
		{map[string]any{"tenantId": "acme", "cursor": "garbage"}, "cursor"},
		{map[string]any{"tenantId": "acme", "state": "gone"}, "state"},
		{map[string]any{"tenantId": "acme", "poolId": "pool_"}, "poolId"},
	} {
		r := e.Call(viewer, "nodes/list", tc.body)
		if r.Code() != "INVALID_INPUT" || r.Path() != tc.path {
			t.Fatalf("%v: %s %s", tc.body, r.Code(), r.Path())
		}
	}
	// Isolation: another tenant, offered the pool or not, sees no nodes.
	e.Must(e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": poolA, "toTenantId": "other", "quota": map[string]any{"gpus": 8, "instances": 1}}))
	for _, method := range []string{"nodes/get", "nodes/cordon", "nodes/remove", "inventory/get", "inventory/history", "inventory/diff"} {
		if c := e.Call(other, method, map[string]any{"tenantId": "other", "nodeId": inA[0]}).Code(); c != "NOT_FOUND" {
			t.Fatalf("other tenant %s: %s", method, c)
		}
	}
	if c := e.Call(other, "nodes/get", map[string]any{"tenantId": "acme", "nodeId": inA[0]}).Code(); c != "PERMISSION_DENIED" {
		t.Fatalf("other tenant naming acme: %s", c)
	}
	if n := len(e.Must(e.Call(other, "nodes/list", map[string]any{"tenantId": "other"})).Body["items"].([]any)); n != 0 {
		t.Fatalf("other tenant lists %d nodes", n)
	}
	if c := e.Call(admin, "nodes/get", map[string]any{"tenantId": "acme", "nodeId": "node_01jd0000000000000000000000"}).Code(); c != "NOT_FOUND" {
		t.Fatalf("unknown node: %s", c)
	}
	_ = fmt.Sprint()
}
