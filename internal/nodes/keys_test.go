package nodes_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"log/slog"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

// csrOf is a CSR of key with the given subject.
func csrOf(t *testing.T, key *ecdsa.PrivateKey, cn string) string {
	t.Helper()
	csr, err := pki.CSRFor(key, cn)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// A key pair is one live node's on the whole platform, whatever CSR
// carries it: a new CSR of a live node's key (another subject, or an ECDSA
// signature made again) is CONFLICT, naming the node to its own tenant
// only. A probe joined three nodes with one key in a tenant, and one more
// in another tenant, each time through a new CSR. A node that joined
// before migration 00025 gets its key recorded from its certificate
// (RecordNodeKeys).
func TestAKeyIsOneLiveNodesWhateverItsCSR(t *testing.T) {
	e := newEnv(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	m := testkit.NewMachine(t)
	m.CSR = csrOf(t, key, "first")
	first := fixture.Must(e.join(m, e.token(1)))

	for _, cn := range []string{"second", "first"} { // another subject; the same, signed again
		again := testkit.NewMachine(t)
		again.CSR = csrOf(t, key, cn)
		_, err := e.join(again, e.token(1))
		fixture.Code(t, err, errs.Conflict, "")
		if ex, _ := errs.As(err); ex == nil || ex.Details["nodeId"] != first.NodeID {
			t.Fatalf("a new CSR (%s) of a live node's key: %v", cn, err)
		}
	}
	// Another tenant's join of the key: CONFLICT, without the node.
	bp := fixture.Must(pools.Create(e.F.Ctx, e.F.DB, &pools.CreateInput{TenantID: "beta", Name: "own", Site: "fra1",
		GPUModel: "H100-SXM5-80GB", SharingMode: "exclusive", Kind: "bare-metal"}))
	bt := fixture.Must(fixture.Call[nodes.CreatedJoinToken](e.F, e.beta.Admin, "joinTokens.create",
		map[string]any{"tenantId": "beta", "poolId": bp.PoolID, "maxUses": 1}))
	other := testkit.NewMachine(t)
	other.CSR = csrOf(t, key, "beta's")
	_, err = e.join(other, bt.Secret)
	fixture.Code(t, err, errs.Conflict, "")
	if ex, _ := errs.As(err); ex == nil || ex.Details["nodeId"] != nil {
		t.Fatalf("another tenant's join of the key: %v", err)
	}

	// A node from before the column: its key is recorded at start.
	if _, err := e.F.DB.Exec(`UPDATE nodes SET key_fingerprint = NULL WHERE node_id = $1`, first.NodeID); err != nil {
		t.Fatal(err)
	}
	if err := nodes.RecordNodeKeys(e.F.Ctx, e.F.DB, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := e.F.DB.Get(&got, `SELECT key_fingerprint FROM nodes WHERE node_id = $1`, first.NodeID); err != nil {
		t.Fatal(err)
	}
	if got != pki.KeyFingerprint(spki) {
		t.Fatalf("recorded key %s, want %s", got, pki.KeyFingerprint(spki))
	}
}
