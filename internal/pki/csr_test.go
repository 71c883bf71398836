package pki_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pki"
)

func mustCSR(t testing.TB) string {
	t.Helper()
	_, csrPEM, err := pki.NewCSR("node")
	if err != nil {
		t.Fatal(err)
	}
	return csrPEM
}

func ecKey(t testing.TB, c elliptic.Curve) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ed25519Key(t testing.TB) crypto.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var rsaKeys = map[int]*rsa.PrivateKey{}

func rsaKey(t testing.TB, bits int) crypto.Signer {
	t.Helper()
	if k := rsaKeys[bits]; k != nil {
		return k
	}
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	rsaKeys[bits] = k
	return k
}

func csrDER(t testing.TB, key crypto.Signer, alg x509.SignatureAlgorithm) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "node"}, SignatureAlgorithm: alg,
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func pemOf(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func csrFor(t testing.TB, key crypto.Signer) string {
	return pemOf("CERTIFICATE REQUEST", csrDER(t, key, 0))
}

func TestParseCSRValid(t *testing.T) {
	for name, pemText := range map[string]string{
		"ecdsa p256":     csrFor(t, ecKey(t, elliptic.P256())),
		"ecdsa p384":     csrFor(t, ecKey(t, elliptic.P384())),
		"ed25519":        csrFor(t, ed25519Key(t)),
		"rsa2048":        csrFor(t, rsaKey(t, 2048)),
		"rsa2048 pss":    pemOf("CERTIFICATE REQUEST", csrDER(t, rsaKey(t, 2048), x509.SHA256WithRSAPSS)),
		"crlf":           strings.ReplaceAll(mustCSR(t), "\n", "\r\n"),
		"surrounding ws": "\n\n  " + mustCSR(t) + "\n\t \n",
		"no final nl":    strings.TrimRight(mustCSR(t), "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			csr, err := pki.ParseCSR("csr", pemText)
			if err != nil {
				t.Fatal(err)
			}
			block, _ := pem.Decode([]byte(strings.TrimSpace(pemText)))
			sum := sha256.Sum256(block.Bytes)
			if csr.Fingerprint != hex.EncodeToString(sum[:]) {
				t.Errorf("fingerprint %s", csr.Fingerprint)
			}
			if csr.Request == nil || csr.Request.CheckSignature() != nil {
				t.Error("request missing or its signature does not verify")
			}
		})
	}
}

func TestParseCSRFingerprint(t *testing.T) {
	key := ecKey(t, elliptic.P256())
	a, err := pki.ParseCSR("csr", csrFor(t, key))
	if err != nil {
		t.Fatal(err)
	}
	b, err := pki.ParseCSR("csr", csrFor(t, key))
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint == b.Fingerprint {
		t.Error("two CSRs for one key share a fingerprint")
	}
	if string(a.Request.RawSubjectPublicKeyInfo) != string(b.Request.RawSubjectPublicKeyInfo) {
		t.Error("the key changed")
	}
	if len(a.Fingerprint) != 64 || strings.ToLower(a.Fingerprint) != a.Fingerprint {
		t.Errorf("fingerprint %q is not lowercase hex SHA-256", a.Fingerprint)
	}
}

// flipSignature breaks the signature: the last byte of the DER is the last
// byte of the signature BIT STRING.
func flipSignature(der []byte) []byte {
	out := append([]byte(nil), der...)
	out[len(out)-1] ^= 0x01
	return out
}

func TestParseCSRInvalid(t *testing.T) {
	valid := mustCSR(t)
	validDER := csrDER(t, ecKey(t, elliptic.P256()), 0)
	cert := func() string {
		k := ecKey(t, elliptic.P256())
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: bigOne()}, &x509.Certificate{SerialNumber: bigOne()}, k.Public(), k)
		if err != nil {
			t.Fatal(err)
		}
		return pemOf("CERTIFICATE", der)
	}()
	cases := map[string]string{
		"empty":              "",
		"whitespace":         " \n\t",
		"not pem":            "hello",
		"base64 only":        strings.Join(strings.Split(valid, "\n")[1:3], "\n"),
		"bad pem":            "-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n",
		"no end line":        strings.Split(valid, "-----END")[0],
		"mismatched end":     strings.Replace(valid, "END CERTIFICATE REQUEST", "END CERTIFICATE", 1),
		"truncated":          valid[:len(valid)/2],
		"wrong block type":   cert,
		"new csr type":       pemOf("NEW CERTIFICATE REQUEST", validDER),
		"private key":        pemOf("PRIVATE KEY", validDER),
		"two blocks":         valid + mustCSR(t),
		"csr then cert":      valid + cert,
		"trailing garbage":   valid + "garbage\n",
		"leading garbage":    "garbage\n" + valid,
		"headers":            pemOf2("CERTIFICATE REQUEST", map[string]string{"Proc-Type": "4,ENCRYPTED"}, validDER),
		"over 16 KiB":        valid + strings.Repeat(" ", 16<<10),
		"not pkcs10":         pemOf("CERTIFICATE REQUEST", []byte("not der at all")),
		"certificate der":    pemOf("CERTIFICATE REQUEST", parseBlock(t, cert)),
		"der trailing bytes": pemOf("CERTIFICATE REQUEST", append(append([]byte(nil), validDER...), 0, 0)),
		"broken signature":   pemOf("CERTIFICATE REQUEST", flipSignature(validDER)),
		"rsa 1024":           csrFor(t, rsaKey(t, 1024)),
		"p224":               csrFor(t, ecKey(t, elliptic.P224())),
		"p521":               csrFor(t, ecKey(t, elliptic.P521())),
		"ecdsa sha1":         pemOf("CERTIFICATE REQUEST", csrDER(t, ecKey(t, elliptic.P256()), x509.ECDSAWithSHA1)),
		"rsa sha1":           pemOf("CERTIFICATE REQUEST", csrDER(t, rsaKey(t, 2048), x509.SHA1WithRSA)),
	}
	if len(cases["over 16 KiB"]) <= 16<<10 {
		t.Fatal("over 16 KiB case is not")
	}
	for name, pemText := range cases {
		t.Run(name, func(t *testing.T) {
			csr, err := pki.ParseCSR("csr", pemText)
			if err == nil {
				t.Fatalf("accepted: %+v", csr)
			}
			if csr != nil {
				t.Error("non-nil CSR with an error")
			}
			wantInvalid(t, err, "csr")
		})
	}
}

func TestParseCSRPath(t *testing.T) {
	_, err := pki.ParseCSR("node.csr", "junk")
	wantInvalid(t, err, "node.csr")
}

func wantInvalid(t *testing.T, err error, path string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("not a domain error: %v", err)
	}
	if e.Code != errs.InvalidInput {
		t.Errorf("code %s: %v", e.Code, err)
	}
	if e.Details["path"] != path {
		t.Errorf("details %v; want path %q", e.Details, path)
	}
	t.Log(e.Message)
	if e.Message == "" {
		t.Error("empty message")
	}
}

func pemOf2(typ string, headers map[string]string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Headers: headers, Bytes: der}))
}

func parseBlock(t testing.TB, s string) []byte {
	t.Helper()
	b, _ := pem.Decode([]byte(s))
	if b == nil {
		t.Fatal("no PEM block")
	}
	return b.Bytes
}
