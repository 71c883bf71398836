package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"

	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/tpmsim"
)

// The machine side of these tests is the reference TPM 2.0 (tpmsim): the
// server's challenges are activated by a real TPM, or fail to be.

// tpmMachine is a machine with a TPM: its identity for the join, and the
// endorsement and attestation keys loaded in the TPM.
type tpmMachine struct {
	testkit.Machine
	tpm    *tpmsim.TPM
	ek, ak *tpmsim.Key
}

func newTPMMachine(t *testing.T, x *tpmsim.TPM, ekAlg string, akTmpl tpm2.TPMTPublic) *tpmMachine {
	return &tpmMachine{Machine: testkit.NewMachine(t), tpm: x, ek: x.EK(ekAlg), ak: x.AK(akTmpl)}
}

// body is nodes.join's input through the tpm attestor with evidence.
func (m *tpmMachine) body(tok string, evidence map[string]any) map[string]any {
	b := m.JoinBody(tok)
	b["attestor"] = "tpm"
	b["evidence"] = evidence
	return b
}

// keys is the first call's evidence.
func (m *tpmMachine) keys() map[string]any {
	return map[string]any{"ekPublicKey": m.ek.PEM(), "akPublic": m.ak.PublicB64()}
}

// challenge makes the first call and checks the challenge's shape.
func (m *tpmMachine) challenge(t *testing.T, e *testkit.Env, tok string) testkit.Resp {
	t.Helper()
	r := e.Must(e.Call("", "nodes/join", m.body(tok, m.keys())))
	if r.Str("status") != "challenge" || !strings.HasPrefix(r.Str("challengeId"), "chl_") || r.Str("nodeId") != "" || r.Str("credential") != "" {
		t.Fatalf("first call: %s", r.Raw)
	}
	return r
}

// activate runs TPM2_ActivateCredential on the challenge's blobs and
// returns the secret, base64.
func (m *tpmMachine) activate(t *testing.T, ch testkit.Resp) string {
	t.Helper()
	secret, err := m.tpm.Activate(m.ak, m.ek, ch.Str("credentialBlob"), ch.Str("encryptedSecret"))
	if err != nil {
		t.Fatalf("the TPM did not activate the server's credential: %v", err)
	}
	return base64.StdEncoding.EncodeToString(secret)
}

func answer(ch testkit.Resp, secret string) map[string]any {
	return map[string]any{"challengeId": ch.Str("challengeId"), "activatedSecret": secret}
}

// exchange is the whole join: keys, challenge, activation, answer.
func (m *tpmMachine) exchange(t *testing.T, e *testkit.Env, tok string) testkit.Resp {
	t.Helper()
	ch := m.challenge(t, e, tok)
	return e.Call("", "nodes/join", m.body(tok, answer(ch, m.activate(t, ch))))
}

func refusal(r testkit.Resp) string {
	e, _ := r.Body["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	s, _ := d["reason"].(string)
	return s
}

// errDetail is one of an error response's details.
func errDetail(r testkit.Resp, key string) any {
	e, _ := r.Body["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	return d[key]
}

func wantRefused(t *testing.T, r testkit.Resp, why string) {
	t.Helper()
	if r.Status != http.StatusUnauthorized || r.Code() != "UNAUTHENTICATED" || refusal(r) != why {
		t.Fatalf("want UNAUTHENTICATED %s, got %d %s %s: %s", why, r.Status, r.Code(), refusal(r), r.Raw)
	}
}

func tokenUses(t *testing.T, e *testkit.Env, admin, pool string) float64 {
	t.Helper()
	l := e.Must(e.Call(admin, "joinTokens/list", map[string]any{"tenantId": "acme", "poolId": pool}))
	return l.Body["items"].([]any)[0].(map[string]any)["uses"].(float64)
}

func randomSecret() string {
	b := make([]byte, pki.SecretSize)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// The whole exchange through the method surface: a TPM whose EK is on no
// allow-list proves possession and is deferred (the owner sees it proven);
// approved, it is admitted after a new challenge; allow-listed, the same
// TPM with a new key pair is admitted at once. Challenges spend no use of
// the token; a replayed answer is refused.
func TestTPMJoinProvesPossession(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	x := tpmsim.Open(t, 11)
	m := newTPMMachine(t, x, "rsa", tpmsim.AKTemplateRSA)
	ekHash, err := pki.EKHash("ek", m.ek.PEM())
	if err != nil {
		t.Fatal(err)
	}

	before := time.Now()
	ch := m.challenge(t, e, tok)
	exp, err := time.Parse(time.RFC3339Nano, ch.Str("expiresAt"))
	if err != nil || exp.Before(before.Add(4*time.Minute)) || exp.After(time.Now().Add(6*time.Minute)) {
		t.Fatalf("expiresAt %q (%v): want about 5 minutes from now", ch.Str("expiresAt"), err)
	}
	if ch.Str("poolId") != pool {
		t.Fatalf("challenge: %s", ch.Raw)
	}
	if u := tokenUses(t, e, admin, pool); u != 0 {
		t.Fatalf("a challenge spent %v uses of the token", u)
	}
	secret := m.activate(t, ch)
	r := e.Must(e.Call("", "nodes/join", m.body(tok, answer(ch, secret))))
	if r.Str("status") != "pending" || r.Body["reasons"].([]any)[0].(map[string]any)["code"] != nodes.ReasonEKNotAllowed {
		t.Fatalf("proven EK on no allow-list: %s", r.Raw)
	}
	if msg := r.Body["reasons"].([]any)[0].(map[string]any)["message"].(string); !strings.Contains(msg, "proved") {
		t.Fatalf("the reason does not say possession was proven: %s", msg)
	}
	reqID := r.Str("joinRequestId")
	g := e.Must(e.Call(admin, "joinRequests/get", map[string]any{"tenantId": "acme", "joinRequestId": reqID}))
	if g.Body["ekProven"] != true || g.Str("ekHash") != ekHash || g.Str("attestor") != "tpm" {
		t.Fatalf("the owner's view of the request: %s", g.Raw)
	}
	// The graph shows it too.
	q := e.GraphQL(admin, `{ tenant(tenantId: "acme") { pools(first: 5) { edges { node { joinRequests { edges { node { ekHash ekProven attestor } } } } } } } }`, nil)
	if !strings.Contains(string(q.Raw), `{"ekHash":"`+ekHash+`","ekProven":true,"attestor":"TPM"}`) {
		t.Fatalf("the graph's join request: %s", q.Raw)
	}
	// The answer is single-use.
	wantRefused(t, e.Call("", "nodes/join", m.body(tok, answer(ch, secret))), nodes.ChallengeUsed)
	// Asking again answers the same pending request, after a new challenge.
	if r := m.exchange(t, e, tok); r.Str("status") != "pending" || r.Str("joinRequestId") != reqID {
		t.Fatalf("retry while pending: %s", r.Raw)
	}

	// Approved: the retry proves possession again and consumes the approval.
	e.Must(e.Call(admin, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": reqID}))
	ch = m.challenge(t, e, tok)
	if r := e.Call("", "nodes/join", m.body(tok, answer(ch, randomSecret()))); r.Code() != "UNAUTHENTICATED" {
		t.Fatalf("an approval let a wrong secret in: %s", r.Raw)
	}
	a := e.Must(m.exchange(t, e, tok))
	if a.Str("status") != "admitted" || a.Str("credential") == "" || a.Str("joinRequestId") != reqID {
		t.Fatalf("approved retry: %s", a.Raw)
	}
	n := e.Must(e.Call(admin, "nodes/get", map[string]any{"tenantId": "acme", "nodeId": a.Str("nodeId")}))
	if n.Str("attestor") != "tpm" {
		t.Fatalf("node: %s", n.Raw)
	}

	// Allow-listed: while its node is live, the same TPM with a new key
	// pair and other hardware ids is CONFLICT naming the node, and spends
	// nothing; once the node is removed, it is admitted at once, spending
	// one use.
	e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": m.ek.PEM()}))
	first := a.Str("nodeId")
	m.Machine = testkit.NewMachine(t)
	if r := m.exchange(t, e, tok); r.Code() != "CONFLICT" || errDetail(r, "nodeId") != first || !strings.Contains(string(r.Raw), "this TPM already joined") {
		t.Fatalf("one TPM admitted as a second live node: %s", r.Raw)
	}
	if u := tokenUses(t, e, admin, pool); u != 0 {
		t.Fatalf("a refused join spent %v uses", u)
	}
	e.Must(e.Call(admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": first}))
	a = e.Must(m.exchange(t, e, tok))
	if a.Str("status") != "admitted" || a.Str("joinRequestId") != "" {
		t.Fatalf("allow-listed EK: %s", a.Raw)
	}
	if u := tokenUses(t, e, admin, pool); u != 1 {
		t.Fatalf("uses %v, want 1 (the approval spent none, the allow-list one)", u)
	}
	e.Must(e.Call(cred(a), "inventory/report", map[string]any{"nodeId": a.Str("nodeId"), "sections": map[string]any{}}))

	// An ECC P-256 EK and AK go the same way.
	for _, k := range []*tpmsim.Key{m.ek, m.ak} {
		if _, err := (tpm2.FlushContext{FlushHandle: k.Handle}).Execute(x); err != nil {
			t.Fatal(err)
		}
	}
	ec := newTPMMachine(t, x, "ecc", tpmsim.AKTemplateECC)
	e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": ec.ek.PEM()}))
	if a := e.Must(ec.exchange(t, e, tok)); a.Str("status") != "admitted" {
		t.Fatalf("ECC EK: %s", a.Raw)
	}
}

func cred(r testkit.Resp) string { return r.Str("credential") }

// Whoever knows an allowed EK's public key but holds another TPM cannot
// answer: its TPM does not activate the credential, and whatever secret it
// sends is refused and spends the challenge.
func TestTPMAttackerWithAnotherTPMIsRefused(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	victim := tpmsim.Open(t, 21)
	victimEK := victim.EK("rsa").PEM()
	victim.Close()
	e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": victimEK}))

	x := tpmsim.Open(t, 22)
	m := newTPMMachine(t, x, "rsa", tpmsim.AKTemplateRSA)
	ev := m.keys()
	ev["ekPublicKey"] = victimEK
	ch := e.Must(e.Call("", "nodes/join", m.body(tok, ev)))
	if ch.Str("status") != "challenge" {
		t.Fatalf("first call: %s", ch.Raw)
	}
	if _, err := x.Activate(m.ak, m.ek, ch.Str("credentialBlob"), ch.Str("encryptedSecret")); err == nil {
		t.Fatal("another TPM activated a credential made for the victim's EK")
	}
	wantRefused(t, e.Call("", "nodes/join", m.body(tok, answer(ch, randomSecret()))), nodes.ChallengeWrong)
	// The refused answer spent the challenge.
	wantRefused(t, e.Call("", "nodes/join", m.body(tok, answer(ch, randomSecret()))), nodes.ChallengeUsed)
	var nodesN, requests int
	_ = e.DB.GetContext(context.Background(), &nodesN, `SELECT count(*) FROM nodes`)
	_ = e.DB.GetContext(context.Background(), &requests, `SELECT count(*) FROM join_requests`)
	if nodesN != 0 || requests != 0 {
		t.Fatalf("the attacker left %d nodes and %d join requests", nodesN, requests)
	}
	// A pending request for a CSR, made from one TPM, gives nothing to the
	// same CSR sent from another TPM, approved or not. (The simulator holds
	// three objects.)
	if _, err := (tpm2.FlushContext{FlushHandle: m.ak.Handle}).Execute(x); err != nil {
		t.Fatal(err)
	}
	m2 := newTPMMachine(t, x, "ecc", tpmsim.AKTemplateECC)
	p := e.Must(m2.exchange(t, e, tok))
	if p.Str("status") != "pending" {
		t.Fatalf("m2: %s", p.Raw)
	}
	e.Must(e.Call(admin, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": p.Str("joinRequestId")}))
	thief := &tpmMachine{Machine: m2.Machine, tpm: x, ek: m.ek, ak: m2.ak} // same CSR and ids, another EK
	if r := thief.exchange(t, e, tok); r.Code() != "PERMISSION_DENIED" {
		t.Fatalf("an approval went to another TPM: %s", r.Raw)
	}
	if r := e.Must(m2.exchange(t, e, tok)); r.Str("status") != "admitted" {
		t.Fatalf("the approved TPM: %s", r.Raw)
	}
}

// An approval made for a TPM is consumed only by that TPM's proof: the
// same join token, CSR and hardware ids sent through the token or the
// discovery attestor, with no evidence, are PERMISSION_DENIED naming the
// request (as another TPM is) and consume nothing; the TPM itself is
// admitted after, with the request's id.
func TestTPMApprovalIsNotConsumedWithoutTheTPM(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	x := tpmsim.Open(t, 91)
	m := newTPMMachine(t, x, "ecc", tpmsim.AKTemplateECC)
	m.SystemUUID, m.Serial = "00000000-0000-0000-0000-000000000000", "To Be Filled By O.E.M."
	p := e.Must(m.exchange(t, e, tok))
	reqID := p.Str("joinRequestId")
	if p.Str("status") != "pending" || len(p.Body["reasons"].([]any)) != 2 {
		t.Fatalf("placeholder hardware and an EK on no allow-list: %s", p.Raw)
	}
	ref := map[string]any{"tenantId": "acme", "joinRequestId": reqID}
	if g := e.Must(e.Call(admin, "joinRequests/get", ref)); g.Body["ekProven"] != true || g.Str("attestor") != "tpm" {
		t.Fatalf("the request: %s", g.Raw)
	}
	e.Must(e.Call(admin, "joinRequests/approve", ref))
	for _, attestor := range []string{"token", "discovery"} {
		b := m.JoinBody(tok)
		b["attestor"] = attestor
		r := e.Call("", "nodes/join", b)
		if r.Code() != "PERMISSION_DENIED" || errDetail(r, "joinRequestId") != reqID {
			t.Fatalf("the %s attestor without the TPM: %d %s", attestor, r.Status, r.Raw)
		}
	}
	if g := e.Must(e.Call(admin, "joinRequests/get", ref)); g.Str("state") != "approved" || g.Body["nodeId"] != nil {
		t.Fatalf("the approval after joins without the TPM: %s", g.Raw)
	}
	a := e.Must(m.exchange(t, e, tok))
	if a.Str("status") != "admitted" || a.Str("joinRequestId") != reqID {
		t.Fatalf("the approved TPM: %s", a.Raw)
	}
	if n := e.Must(e.Call(admin, "nodes/get", map[string]any{"tenantId": "acme", "nodeId": a.Str("nodeId")})); n.Str("attestor") != "tpm" {
		t.Fatalf("node: %s", n.Raw)
	}
}

// A challenge answers only for what it was made for: the same token, CSR,
// hardware ids, EK and AK, within 5 minutes; each refusal spends it.
func TestTPMChallengeIsBound(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	tok2 := e.JoinToken(admin, "acme", pool, 10)
	x := tpmsim.Open(t, 31)
	m := newTPMMachine(t, x, "ecc", tpmsim.AKTemplateRSA)
	e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": m.ek.PEM()}))
	otherEK, _, _ := pki.NewEK()
	otherAK := x.AK(tpmsim.AKTemplateECC)

	for _, tc := range []struct {
		name string
		call func(ch testkit.Resp, secret string) map[string]any
	}{
		{"another CSR", func(ch testkit.Resp, secret string) map[string]any {
			o := *m
			o.Machine.CSR = testkit.NewMachine(t).CSR
			return o.body(tok, answer(ch, secret))
		}},
		{"another join token", func(ch testkit.Resp, secret string) map[string]any { return m.body(tok2, answer(ch, secret)) }},
		{"other hardware", func(ch testkit.Resp, secret string) map[string]any {
			o := *m
			o.Machine.Serial = "SN-OTHER-1"
			return o.body(tok, answer(ch, secret))
		}},
		{"another EK", func(ch testkit.Resp, secret string) map[string]any {
			a := answer(ch, secret)
			a["ekPublicKey"] = otherEK
			return m.body(tok, a)
		}},
		{"another AK", func(ch testkit.Resp, secret string) map[string]any {
			a := answer(ch, secret)
			a["akPublic"] = otherAK.PublicB64()
			return m.body(tok, a)
		}},
	} {
		ch := m.challenge(t, e, tok)
		secret := m.activate(t, ch)
		wantRefused(t, e.Call("", "nodes/join", tc.call(ch, secret)), nodes.ChallengeMismatch)
		// The right answer comes too late: the mismatch spent the challenge.
		wantRefused(t, e.Call("", "nodes/join", m.body(tok, answer(ch, secret))), nodes.ChallengeUsed)
	}
	// The keys repeated with the answer are fine when they are the challenge's.
	ch := m.challenge(t, e, tok)
	a := answer(ch, m.activate(t, ch))
	for k, v := range m.keys() {
		a[k] = v
	}
	if r := e.Must(e.Call("", "nodes/join", m.body(tok, a))); r.Str("status") != "admitted" {
		t.Fatalf("answer with its keys: %s", r.Raw)
	}

	// Expired (the challenge is aged in the database: its expiry is
	// PostgreSQL's clock, as every expiry of joins).
	m.Machine = testkit.NewMachine(t)
	ch = m.challenge(t, e, tok)
	if _, err := e.DB.ExecContext(context.Background(), `UPDATE tpm_challenges SET expires_at = now() - interval '1 second' WHERE challenge_id = $1`,
		ch.Str("challengeId")); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, e.Call("", "nodes/join", m.body(tok, answer(ch, m.activate(t, ch)))), nodes.ChallengeExpired)
	// An unknown challenge.
	wantRefused(t, e.Call("", "nodes/join", m.body(tok, map[string]any{"challengeId": "chl_01jfz0000000000000000000000", "activatedSecret": randomSecret()})),
		nodes.ChallengeUnknown)
	// None of it spent a use beyond the one admission.
	if u := tokenUses(t, e, admin, pool); u != 1 {
		t.Fatalf("uses %v", u)
	}
}

// The attestation key must be a restricted signing key fixed to its TPM;
// malformed evidence is INVALID_INPUT naming the field.
func TestTPMEvidenceIsChecked(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	x := tpmsim.Open(t, 41)
	m := newTPMMachine(t, x, "rsa", tpmsim.AKTemplateECC)
	unrestricted := tpmsim.AKTemplateECC
	unrestricted.ObjectAttributes.Restricted = false
	notFixed := tpmsim.AKTemplateECC
	notFixed.ObjectAttributes.FixedTPM, notFixed.ObjectAttributes.FixedParent = false, false
	for name, tmpl := range map[string]tpm2.TPMTPublic{"not restricted": unrestricted, "not fixedTPM": notFixed} {
		k := x.AK(tmpl) // a real key the TPM made
		ev := m.keys()
		ev["akPublic"] = k.PublicB64()
		r := e.Call("", "nodes/join", m.body(tok, ev))
		if r.Code() != "INVALID_INPUT" || r.Path() != "evidence.akPublic" || !strings.Contains(string(r.Raw), name) {
			t.Fatalf("%s: %s", name, r.Raw)
		}
		if _, err := (tpm2.FlushContext{FlushHandle: k.Handle}).Execute(x); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		ev   map[string]any
		path string
	}{
		{"no ak", map[string]any{"ekPublicKey": m.ek.PEM()}, "evidence.akPublic"},
		{"ak not base64", map[string]any{"ekPublicKey": m.ek.PEM(), "akPublic": "not base64!"}, "evidence.akPublic"},
		{"ak not tpmt", map[string]any{"ekPublicKey": m.ek.PEM(), "akPublic": "AAECAwQ="}, "evidence.akPublic"},
		{"ak as ek", map[string]any{"ekPublicKey": m.ak.PEM(), "akPublic": m.ek.PublicB64()}, "evidence.akPublic"},
		{"secret without id", map[string]any{"activatedSecret": randomSecret()}, "evidence.challengeId"},
		{"id without secret", map[string]any{"challengeId": "chl_01jfz0000000000000000000000"}, "evidence.activatedSecret"},
		// (a secret of another length than the challenge's is a wrong
		// answer, refused by the challenge; past the largest digest, 64
		// bytes, it is not a secret)
		{"long secret", map[string]any{"challengeId": "chl_01jfz0000000000000000000000", "activatedSecret": base64.StdEncoding.EncodeToString(make([]byte, 65))}, "evidence.activatedSecret"},
		{"secret not base64", map[string]any{"challengeId": "chl_01jfz0000000000000000000000", "activatedSecret": "AAA"}, "evidence.activatedSecret"},
		{"bad challenge id", map[string]any{"challengeId": "jreq_01jfz0000000000000000000000", "activatedSecret": randomSecret()}, "evidence.challengeId"},
		{"certificate with the answer", map[string]any{"challengeId": "chl_01jfz0000000000000000000000", "activatedSecret": randomSecret(),
			"ekCertificate": "x"}, "evidence.ekCertificate"},
		{"certificate not of the ek", map[string]any{"ekPublicKey": m.ek.PEM(), "akPublic": m.ak.PublicB64(), "ekCertificate": testCA(t).cert}, "evidence.ekCertificate"},
	} {
		r := e.Call("", "nodes/join", m.body(tok, tc.ev))
		if r.Code() != "INVALID_INPUT" || r.Path() != tc.path {
			t.Fatalf("%s: %s", tc.name, r.Raw)
		}
	}

	// A denied request is PERMISSION_DENIED, to a challenge made before the
	// denial and to a new first call.
	p := e.Must(m.exchange(t, e, tok))
	if p.Str("status") != "pending" {
		t.Fatalf("pending: %s", p.Raw)
	}
	ch := m.challenge(t, e, tok)
	e.Must(e.Call(admin, "joinRequests/deny", map[string]any{"tenantId": "acme", "joinRequestId": p.Str("joinRequestId")}))
	if r := e.Call("", "nodes/join", m.body(tok, answer(ch, m.activate(t, ch)))); r.Code() != "PERMISSION_DENIED" {
		t.Fatalf("answer after the denial: %s", r.Raw)
	}
	if r := e.Call("", "nodes/join", m.body(tok, m.keys())); r.Code() != "PERMISSION_DENIED" {
		t.Fatalf("first call after the denial: %s", r.Raw)
	}
}

// Open challenges per join token are bounded, under concurrent calls too;
// an answered challenge frees its place. Concurrent answers of one
// challenge admit once.
func TestTPMOpenChallengesAreBounded(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	x := tpmsim.Open(t, 51)
	m := newTPMMachine(t, x, "ecc", tpmsim.AKTemplateECC)
	e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "ekPublicKey": m.ek.PEM()}))
	body := m.body(tok, m.keys())

	const extra = 8
	var mu sync.Mutex
	got := map[int]int{}
	var first testkit.Resp
	var wg sync.WaitGroup
	for i := 0; i < nodes.MaxOpenChallenges+extra; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Call("", "nodes/join", body)
			mu.Lock()
			defer mu.Unlock()
			got[r.Status]++
			if r.Status == http.StatusTooManyRequests {
				// Retry when the oldest challenge expires (in about 5 minutes).
				if s, _ := strconv.Atoi(r.Header.Get("Retry-After")); r.Code() != "RATE_LIMITED" || s < 200 || s > 300 || refusal(r) != "open-challenges" {
					t.Errorf("past the bound: %s %v", r.Raw, r.Header)
				}
			} else if first.Body == nil {
				first = r
			}
		}()
	}
	wg.Wait()
	if got[http.StatusOK] != nodes.MaxOpenChallenges || got[http.StatusTooManyRequests] != extra {
		t.Fatalf("statuses %v: want %d challenges and %d refused", got, nodes.MaxOpenChallenges, extra)
	}
	// Eight concurrent answers to one challenge: one admission.
	secret := m.activate(t, first)
	ans := m.body(tok, answer(first, secret))
	got = map[int]int{}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Call("", "nodes/join", ans)
			mu.Lock()
			got[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if got[http.StatusOK] != 1 || got[http.StatusUnauthorized]+got[http.StatusConflict] != 7 {
		t.Fatalf("concurrent answers: %v", got)
	}
	// The answered challenge freed a place for the next machine.
	m.Machine = testkit.NewMachine(t)
	m.challenge(t, e, tok)
	if r := e.Call("", "nodes/join", m.body(tok, m.keys())); r.Code() != "RATE_LIMITED" {
		t.Fatalf("past the bound again: %s", r.Raw)
	}
}

// ca is a CA for EK certificates in tests (a TPM manufacturer's).
type ca struct {
	cert string // PEM
	x    *x509.Certificate
	key  *ecdsa.PrivateKey
}

func testCA(t *testing.T) *ca { return issueCA(t, nil) }

// issueCA makes a CA certificate, self-signed or issued by parent.
func issueCA(t *testing.T, parent *ca) *ca {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "TPM EK CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	signer, by := key, tmpl
	if parent != nil {
		signer, by = parent.key, parent.x
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, by, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &ca{cert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), x: c, key: key}
}

// ekCert issues an EK certificate for the EK (PEM public key).
func (c *ca) ekCert(t *testing.T, ekPEM string) string {
	b, _ := pem.Decode([]byte(ekPEM))
	pub, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageKeyEncipherment,
		UnknownExtKeyUsage: []asn1.ObjectIdentifier{{2, 23, 133, 8, 1}}} // tcg-kp-EKCertificate
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.x, pub, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// A CA on the allow-list admits a proven TPM whose EK certificate chains to
// it (through the intermediates the machine sends), without an entry per
// EK; a TPM without a certificate, or with one from another CA, is
// deferred.
func TestTPMEKCertificateChainsToAllowedCA(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)
	root := testCA(t)
	inter := issueCA(t, root)
	a := e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "caCertificate": root.cert, "description": "vendor root"}))
	sum := sha256.Sum256(root.x.Raw)
	if a.Str("kind") != "ca" || a.Str("ekHash") != hex.EncodeToString(sum[:]) || a.Str("caCertificate") != root.cert {
		t.Fatalf("allow a CA: %s", a.Raw)
	}
	if c := e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "caCertificate": root.cert}).Code(); c != "CONFLICT" {
		t.Fatalf("the CA twice: %s", c)
	}
	x := tpmsim.Open(t, 61)
	m := newTPMMachine(t, x, "rsa", tpmsim.AKTemplateRSA)
	leaf := inter.ekCert(t, m.ek.PEM())
	if r := e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": pool, "caCertificate": leaf}); r.Code() != "INVALID_INPUT" || r.Path() != "caCertificate" {
		t.Fatalf("a leaf as CA: %s", r.Raw)
	}

	withCert := func(cert string) testkit.Resp {
		ev := m.keys()
		ev["ekCertificate"] = cert
		ch := e.Must(e.Call("", "nodes/join", m.body(tok, ev)))
		return e.Must(e.Call("", "nodes/join", m.body(tok, answer(ch, m.activate(t, ch)))))
	}
	adm := withCert(leaf + inter.cert)
	if adm.Str("status") != "admitted" {
		t.Fatalf("EK certificate chaining to the allowed root: %s", adm.Raw)
	}
	// The TPM of a live node is CONFLICT, deferred or not: removed, the
	// same TPM can be tried again.
	e.Must(e.Call(admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": adm.Str("nodeId")}))
	m.Machine = testkit.NewMachine(t)
	if r := e.Must(m.exchange(t, e, tok)); r.Str("status") != "pending" {
		t.Fatalf("no EK certificate: %s", r.Raw)
	}
	m.Machine = testkit.NewMachine(t)
	if r := withCert(testCA(t).ekCert(t, m.ek.PEM())); r.Str("status") != "pending" {
		t.Fatalf("EK certificate of another CA: %s", r.Raw)
	}
	m.Machine = testkit.NewMachine(t)
	if r := withCert(leaf); r.Str("status") != "pending" {
		t.Fatalf("EK certificate without its intermediate: %s", r.Raw)
	}
	l := e.Must(e.Call(admin, "tpmKeys/list", map[string]any{"tenantId": "acme", "poolId": pool}))
	if items := l.Body["items"].([]any); len(items) != 1 || items[0].(map[string]any)["kind"] != "ca" {
		t.Fatalf("list: %s", l.Raw)
	}
	// The graph's mutation takes a CA too.
	other := testCA(t)
	g := e.GraphQL(admin, `mutation($in: AllowTpmKeyInput!) { allowTpmKey(input: $in) { key { ekHash kind caCertificate } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "caCertificate": other.cert}})
	if !strings.Contains(string(g.Raw), `"kind":"CA"`) || !strings.Contains(string(g.Raw), `BEGIN CERTIFICATE`) {
		t.Fatalf("allowTpmKey with a CA: %s", g.Raw)
	}
	e.Must(e.Call(admin, "tpmKeys/disallow", map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": a.Str("ekHash")}))
	m.Machine = testkit.NewMachine(t)
	if r := withCert(leaf + inter.cert); r.Str("status") != "pending" {
		t.Fatalf("after the CA was disallowed: %s", r.Raw)
	}
}
