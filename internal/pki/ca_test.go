package pki_test

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func parseCertPEM(t *testing.T, s string) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode([]byte(s))
	if block == nil || block.Type != "CERTIFICATE" || strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("not one CERTIFICATE PEM block: %q", s)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoadCreatesCA(t *testing.T) {
	ctx := context.Background()
	db := testkit.DB(t)
	ca, err := pki.Load(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	c := parseCertPEM(t, ca.CertificatePEM())
	if c.Subject.CommonName != "Better Compute node CA" || c.Issuer.CommonName != c.Subject.CommonName {
		t.Errorf("subject %v issuer %v", c.Subject, c.Issuer)
	}
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("basic constraints: IsCA %v valid %v maxPathLen %d zero %v", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("key usage %b", c.KeyUsage)
	}
	if c.PublicKeyAlgorithm != x509.ECDSA || c.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		t.Errorf("key %v signature %v", c.PublicKeyAlgorithm, c.SignatureAlgorithm)
	}
	if years := c.NotAfter.Sub(time.Now()).Hours() / 24 / 365; years < 9.9 || years > 10.1 {
		t.Errorf("valid for %.2f years", years)
	}
	if err := c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", ca, ca, ca, ca); strings.Contains(s, "D:") || !strings.Contains(s, "node CA ") {
		t.Errorf("CA prints as %s", s)
	}

	// The stored form: PKCS #8 key and DER certificate, matching.
	var keyDER, certDER []byte
	if err := db.GetContext(ctx, &keyDER, `SELECT value FROM server_secrets WHERE name = 'node-ca-key'`); err != nil {
		t.Fatal(err)
	}
	if err := db.GetContext(ctx, &certDER, `SELECT value FROM server_secrets WHERE name = 'node-ca-cert'`); err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		t.Fatal(err)
	}
	if !k.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(c.PublicKey) {
		t.Error("stored key is not the certificate's")
	}
	if string(certDER) != string(c.Raw) {
		t.Error("stored certificate is not the one returned")
	}
}

func TestLoadTwiceSameCA(t *testing.T) {
	ctx := context.Background()
	db := testkit.DB(t)
	a, err := pki.Load(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pki.Load(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if a.CertificatePEM() != b.CertificatePEM() {
		t.Fatal("second Load returned another CA")
	}
	// A certificate the first signs verifies under the second.
	_, csrPEM, err := pki.NewCSR("n")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.ParseCSR("csr", csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := a.Sign(csr, "node_x", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, b, certPEM)
}

func TestLoadConcurrent(t *testing.T) {
	ctx := context.Background()
	db := testkit.DB(t)
	const n = 8
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		cas   [n]*pki.CA
		errs  [n]error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cas[i], errs[i] = pki.Load(ctx, db)
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Load %d: %v", i, errs[i])
		}
		if cas[i].CertificatePEM() != cas[0].CertificatePEM() {
			t.Fatalf("Load %d returned another CA", i)
		}
	}
	var rows []struct {
		Name string `db:"name"`
		N    int    `db:"n"`
	}
	if err := db.SelectContext(ctx, &rows, `SELECT name, count(*) AS n FROM server_secrets
		WHERE name LIKE 'node-ca-%' GROUP BY name ORDER BY name`); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Name != "node-ca-cert" || rows[0].N != 1 || rows[1].Name != "node-ca-key" || rows[1].N != 1 {
		t.Fatalf("rows %+v", rows)
	}
	// The stored pair is the one every replica returned, and it signs.
	again, err := pki.Load(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if again.CertificatePEM() != cas[0].CertificatePEM() {
		t.Fatal("stored CA differs from the one returned")
	}
	_, csrPEM, _ := pki.NewCSR("n")
	csr, err := pki.ParseCSR("csr", csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := cas[n-1].Sign(csr, "node_y", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, again, certPEM)
}

func TestLoadIncomplete(t *testing.T) {
	ctx := context.Background()
	for _, drop := range []string{"node-ca-key", "node-ca-cert"} {
		t.Run(drop, func(t *testing.T) {
			db := testkit.DB(t)
			if _, err := pki.Load(ctx, db); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `DELETE FROM server_secrets WHERE name = $1`, drop); err != nil {
				t.Fatal(err)
			}
			if _, err := pki.Load(ctx, db); err == nil {
				t.Fatal("Load with half a CA succeeded")
			}
			var n int
			if err := db.GetContext(ctx, &n, `SELECT count(*) FROM server_secrets WHERE name LIKE 'node-ca-%'`); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("%d rows after a refused Load; want the 1 left", n)
			}
		})
	}
}

func TestLoadMismatched(t *testing.T) {
	ctx := context.Background()
	a, b := testkit.DB(t), testkit.DB(t)
	if _, err := pki.Load(ctx, a); err != nil {
		t.Fatal(err)
	}
	caB, err := pki.Load(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	// Put b's certificate beside a's key.
	certB := parseCertPEM(t, caB.CertificatePEM())
	if _, err := a.ExecContext(ctx, `UPDATE server_secrets SET value = $1 WHERE name = 'node-ca-cert'`, certB.Raw); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.Load(ctx, a); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Load of mismatched key and certificate: %v", err)
	}
}

func verify(t *testing.T, ca *pki.CA, certPEM string) *x509.Certificate {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(ca.CertificatePEM())) {
		t.Fatal("CA PEM does not load into a pool")
	}
	c := parseCertPEM(t, certPEM)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("verify for client auth: %v", err)
	}
	return c
}

func TestSign(t *testing.T) {
	ctx := context.Background()
	db := testkit.DB(t)
	ca, err := pki.Load(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for name, csrPEM := range map[string]string{
		"ecdsa":   mustCSR(t),
		"ed25519": csrFor(t, ed25519Key(t)),
		"rsa2048": csrFor(t, rsaKey(t, 2048)),
	} {
		t.Run(name, func(t *testing.T) {
			csr, err := pki.ParseCSR("csr", csrPEM)
			if err != nil {
				t.Fatal(err)
			}
			const nodeID = "node_01hzy3k8w5q2m6r9t4v7x0b1cd"
			before := time.Now()
			certPEM, notAfter, err := ca.Sign(csr, nodeID, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			c := verify(t, ca, certPEM)
			if c.Subject.CommonName != nodeID {
				t.Errorf("CN %q", c.Subject.CommonName)
			}
			if len(c.URIs) != 1 || c.URIs[0].String() != "urn:bettercompute:node:"+nodeID {
				t.Errorf("URIs %v", c.URIs)
			}
			if len(c.DNSNames)+len(c.IPAddresses)+len(c.EmailAddresses) != 0 {
				t.Errorf("other SANs: %v %v %v", c.DNSNames, c.IPAddresses, c.EmailAddresses)
			}
			pub, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
			if !ok || !pub.Equal(csr.Request.PublicKey) {
				t.Error("certificate key is not the CSR's")
			}
			if c.IsCA {
				t.Error("node certificate is a CA")
			}
			if c.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("key usage %b", c.KeyUsage)
			}
			if len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
				t.Errorf("ext key usage %v", c.ExtKeyUsage)
			}
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
				t.Errorf("serial %v", c.SerialNumber)
			}
			if !notAfter.Equal(c.NotAfter) {
				t.Errorf("returned notAfter %v, certificate %v", notAfter, c.NotAfter)
			}
			if d := c.NotAfter.Sub(before); d < 24*time.Hour-2*time.Second || d > 24*time.Hour+2*time.Second {
				t.Errorf("valid for %v", d)
			}
			if d := before.Sub(c.NotBefore); d < 5*time.Minute-2*time.Second || d > 5*time.Minute+2*time.Second {
				t.Errorf("NotBefore %v before now", d)
			}
			// Not a server certificate.
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM([]byte(ca.CertificatePEM()))
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots}); err == nil {
				t.Error("node certificate verifies for server auth")
			}
		})
	}

	t.Run("serials differ", func(t *testing.T) {
		csr, err := pki.ParseCSR("csr", mustCSR(t))
		if err != nil {
			t.Fatal(err)
		}
		a, _, err := ca.Sign(csr, "node_a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := ca.Sign(csr, "node_a", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if parseCertPEM(t, a).SerialNumber.Cmp(parseCertPEM(t, b).SerialNumber) == 0 {
			t.Error("two certificates with one serial")
		}
	})

	t.Run("capped at the CA", func(t *testing.T) {
		csr, err := pki.ParseCSR("csr", mustCSR(t))
		if err != nil {
			t.Fatal(err)
		}
		_, notAfter, err := ca.Sign(csr, "node_a", 20*365*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if caCert := parseCertPEM(t, ca.CertificatePEM()); notAfter.After(caCert.NotAfter) {
			t.Errorf("node certificate outlives the CA: %v > %v", notAfter, caCert.NotAfter)
		}
	})

	t.Run("refused", func(t *testing.T) {
		csr, err := pki.ParseCSR("csr", mustCSR(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			csr      *pki.CSR
			nodeID   string
			validity time.Duration
		}{
			{nil, "node_a", time.Hour},
			{&pki.CSR{}, "node_a", time.Hour},
			{csr, "", time.Hour},
			{csr, "node a", time.Hour},
			{csr, "node/../x", time.Hour},
			{csr, strings.Repeat("n", 65), time.Hour},
			{csr, "node_a", 0},
			{csr, "node_a", -time.Hour},
		} {
			if _, _, err := ca.Sign(tc.csr, tc.nodeID, tc.validity); err == nil {
				t.Errorf("Sign(%v, %q, %v) succeeded", tc.csr, tc.nodeID, tc.validity)
			}
		}
	})
}
