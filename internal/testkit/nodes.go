package testkit

import (
	"crypto/rand"
	"fmt"

	"github.com/bettercompute/computed/internal/pki"
)

// Machine is a machine's identity for a join: a fresh key pair's CSR and
// real-looking (non-placeholder) hardware ids.
type Machine struct {
	CSR        string
	SystemUUID string
	Serial     string
	MAC        string
}

// NewMachine makes a machine with random ids.
func NewMachine(t interface{ Fatal(...any) }) Machine {
	_, csr, err := pki.NewCSR("machine")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 22)
	_, _ = rand.Read(b)
	return Machine{
		CSR:        csr,
		SystemUUID: fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]),
		Serial:     fmt.Sprintf("SN%X", b[16:22]),
		MAC:        fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", b[16], b[17], b[18], b[19], b[20]),
	}
}

// JoinBody is the nodes.join input for m with the token attestor.
func (m Machine) JoinBody(joinToken string) map[string]any {
	return map[string]any{
		"joinToken": joinToken, "csr": m.CSR, "attestor": "token",
		"hardware": map[string]any{"systemUuid": m.SystemUUID, "serial": m.Serial, "macs": []string{m.MAC}},
	}
}

// Pool creates a bare-metal pool in the tenant and returns its id.
func (e *Env) Pool(admin, tenantID, name string) string {
	e.T.Helper()
	r := e.Must(e.Call(admin, "pools/create", map[string]any{"tenantId": tenantID, "name": name, "site": "fra1",
		"gpuModel": "H100-SXM5-80GB", "sharingMode": "exclusive", "kind": "bare-metal"}))
	return r.Str("poolId")
}

// JoinToken creates a join token for the pool with maxUses and returns its secret.
func (e *Env) JoinToken(admin, tenantID, poolID string, maxUses int) string {
	e.T.Helper()
	r := e.Must(e.Call(admin, "joinTokens/create", map[string]any{"tenantId": tenantID, "poolId": poolID, "maxUses": maxUses}))
	return r.Str("secret")
}

// Node joins a fresh machine to the pool with the token attestor and
// returns the node id and its credential.
func (e *Env) Node(admin, tenantID, poolID string) (nodeID, credential string) {
	e.T.Helper()
	tok := e.JoinToken(admin, tenantID, poolID, 1)
	r := e.Must(e.Call("", "nodes/join", NewMachine(e.T).JoinBody(tok)))
	if r.Str("status") != "admitted" {
		e.T.Fatalf("join: %s", r.Raw)
	}
	return r.Str("nodeId"), r.Str("credential")
}
