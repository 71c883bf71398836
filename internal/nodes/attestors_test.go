package nodes_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

// caPEM is a self-signed CA certificate (isCA as asked) and its hash.
func caPEM(t *testing.T, isCA bool) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "TPM maker root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), fmt.Sprintf("%x", sum[:])
}

// The TPM allow-list: one of ekHash, ekPublicKey and caCertificate; the
// key's hash is computed from its PEM; a CA must be a CA; an entry is
// there once; only the owner manages it.
func TestTPMAllowList(t *testing.T) {
	e := newEnv(t)
	allow := func(in nodes.KeyAllowInput) (*nodes.AllowedKey, error) {
		in.TenantID, in.PoolID = "acme", e.pool
		return nodes.AllowKey(e.Ctx, e.DB, &in)
	}
	_, err := allow(nodes.KeyAllowInput{})
	fixture.Code(t, err, errs.InvalidInput, "ekHash")
	ekPEM, ekHash, err := pki.NewEK()
	if err != nil {
		t.Fatal(err)
	}
	ca, caHash := caPEM(t, true)
	_, err = allow(nodes.KeyAllowInput{EKHash: &ekHash, CACertificate: &ca})
	fixture.Code(t, err, errs.InvalidInput, "caCertificate")
	_, err = allow(nodes.KeyAllowInput{EKHash: &ekHash, EKPublicKey: &ekPEM})
	fixture.Code(t, err, errs.InvalidInput, "ekPublicKey")
	_, err = allow(nodes.KeyAllowInput{EKPublicKey: fixture.Ptr("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")})
	fixture.Code(t, err, errs.InvalidInput, "ekPublicKey")
	leaf, _ := caPEM(t, false)
	_, err = allow(nodes.KeyAllowInput{CACertificate: &leaf})
	fixture.Code(t, err, errs.InvalidInput, "caCertificate")

	k := fixture.Must(allow(nodes.KeyAllowInput{EKPublicKey: &ekPEM, Description: "rack 1"}))
	if k.EKHash != ekHash || k.Kind != nodes.KeyKindEK || k.CACertificate != nil {
		t.Fatalf("allowed by its key: %+v", k)
	}
	_, err = allow(nodes.KeyAllowInput{EKHash: &ekHash})
	fixture.Code(t, err, errs.Conflict, "ekHash")
	c := fixture.Must(allow(nodes.KeyAllowInput{CACertificate: &ca}))
	if c.EKHash != caHash || c.Kind != nodes.KeyKindCA || c.CACertificate == nil || !strings.Contains(*c.CACertificate, "BEGIN CERTIFICATE") {
		t.Fatalf("a CA: %+v", c)
	}
	_, err = allow(nodes.KeyAllowInput{CACertificate: &ca})
	fixture.Code(t, err, errs.Conflict, "caCertificate")

	// Another tenant, the one offered the pool included, neither lists nor changes it.
	_, err = nodes.ListKeys(e.Ctx, e.DB, &nodes.PoolListInput{TenantID: "beta", PoolID: e.pool, Limit: 10})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = nodes.AllowKey(e.Ctx, e.DB, &nodes.KeyAllowInput{TenantID: "beta", PoolID: e.pool, EKHash: fixture.Ptr(strings.Repeat("a", 64))})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = nodes.DisallowKey(e.Ctx, e.DB, &nodes.KeyRefInput{TenantID: "beta", PoolID: e.pool, EKHash: ekHash})
	fixture.Code(t, err, errs.NotFound, "")

	// Pages by hash; disallowed once.
	var seen []string
	cursor := ""
	for n := 0; ; n++ {
		p := fixture.Must(nodes.ListKeys(e.Ctx, e.DB, &nodes.PoolListInput{TenantID: "acme", PoolID: e.pool, Limit: 1, Cursor: cursor}))
		for _, k := range p.Items {
			seen = append(seen, k.EKHash)
		}
		if p.Cursor == nil || n > 3 {
			break
		}
		cursor = *p.Cursor
	}
	if len(seen) != 2 || seen[0] >= seen[1] {
		t.Fatalf("pages: %v", seen)
	}
	fixture.Must(nodes.DisallowKey(e.Ctx, e.DB, &nodes.KeyRefInput{TenantID: "acme", PoolID: e.pool, EKHash: ekHash}))
	_, err = nodes.DisallowKey(e.Ctx, e.DB, &nodes.KeyRefInput{TenantID: "acme", PoolID: e.pool, EKHash: ekHash})
	fixture.Code(t, err, errs.NotFound, "")
}

// Expected machines: at least one id, no placeholder ids; the owner's
// only.
func TestExpectedMachines(t *testing.T) {
	e := newEnv(t)
	reg := func(in nodes.MachineRegisterInput) (*nodes.ExpectedMachine, error) {
		in.TenantID, in.PoolID = "acme", e.pool
		return nodes.RegisterMachine(e.Ctx, e.DB, &in)
	}
	_, err := reg(nodes.MachineRegisterInput{})
	fixture.Code(t, err, errs.InvalidInput, "systemUuid")
	_, err = reg(nodes.MachineRegisterInput{SystemUUID: fixture.Ptr("03000200-0400-0500-0006-000700080009")})
	fixture.Code(t, err, errs.InvalidInput, "systemUuid")
	_, err = reg(nodes.MachineRegisterInput{Serial: fixture.Ptr("To Be Filled By O.E.M.")})
	fixture.Code(t, err, errs.InvalidInput, "serial")
	// a MAC that is no card's own (all zeros, broadcast, any group
	// address) identifies no machine: registered, it admitted any
	// discovery join reporting it
	for _, mac := range []string{"00:00:00:00:00:00", "FF:FF:FF:FF:FF:FF", "01:00:5e:00:00:fb", "33:33:00:00:00:01"} {
		_, err = reg(nodes.MachineRegisterInput{MAC: fixture.Ptr(mac)})
		fixture.Code(t, err, errs.InvalidInput, "mac")
	}
	_, err = nodes.RegisterMachine(e.Ctx, e.DB, &nodes.MachineRegisterInput{TenantID: "beta", PoolID: e.pool, MAC: fixture.Ptr("02:00:00:00:00:01")})
	fixture.Code(t, err, errs.NotFound, "")

	m := fixture.Must(reg(nodes.MachineRegisterInput{SystemUUID: fixture.Ptr("4C4C4544004D3510804CB4C04F4E5A31"), MAC: fixture.Ptr("02:AA:BB:CC:DD:EE")}))
	if *m.SystemUUID != "4c4c4544-004d-3510-804c-b4c04f4e5a31" || *m.MAC != "02:aa:bb:cc:dd:ee" {
		t.Fatalf("normalized: %s %s", *m.SystemUUID, *m.MAC)
	}
	_, err = nodes.ForgetMachine(e.Ctx, e.DB, &nodes.MachineRefInput{TenantID: "beta", MachineID: m.MachineID})
	fixture.Code(t, err, errs.NotFound, "")
	fixture.Must(nodes.ForgetMachine(e.Ctx, e.DB, &nodes.MachineRefInput{TenantID: "acme", MachineID: m.MachineID}))
	_, err = nodes.ForgetMachine(e.Ctx, e.DB, &nodes.MachineRefInput{TenantID: "acme", MachineID: m.MachineID})
	fixture.Code(t, err, errs.NotFound, "")
}

// The same ids registered again, by 32 calls at once, are one expected
// machine, answered to every call (a probe's 32 concurrent registrations
// of one serial made 32 entries); ids that differ in any one, or in one
// given or not, are another machine.
func TestRegisteringAMachineAgainIsTheMachine(t *testing.T) {
	e := newEnv(t)
	reg := func(in nodes.MachineRegisterInput) (*nodes.ExpectedMachine, error) {
		in.TenantID, in.PoolID = "acme", e.pool
		return nodes.RegisterMachine(e.Ctx, e.DB, &in)
	}
	got := make([]string, 32)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mac := "02:aa:bb:cc:dd:ee"
			if i%2 == 1 {
				mac = "02:AA:BB:CC:DD:EE" // the same, as normalized
			}
			m, err := reg(nodes.MachineRegisterInput{Serial: fixture.Ptr("SN-0001"), MAC: fixture.Ptr(mac)})
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = m.MachineID
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("registration %d answered %s, the first %s", i, got[i], got[0])
		}
	}
	other := fixture.Must(reg(nodes.MachineRegisterInput{Serial: fixture.Ptr("SN-0001")}))
	if other.MachineID == got[0] {
		t.Fatal("the serial alone is the machine registered with serial and MAC")
	}
	var n int
	if err := e.DB.Get(&n, `SELECT count(*) FROM expected_machines WHERE pool_id = $1`, e.pool); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d expected machines, want 2", n)
	}
}
