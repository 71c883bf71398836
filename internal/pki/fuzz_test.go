package pki_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit/tpmsim"
)

// FuzzParseCSR: ParseCSR never panics, fails only with INVALID_INPUT naming
// the path, and whatever it accepts has a verifying signature and the
// fingerprint of its DER.
func FuzzParseCSR(f *testing.F) {
	_, csrPEM, err := pki.NewCSR("seed")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(csrPEM)
	f.Add(csrPEM[:len(csrPEM)/2])
	f.Add(csrPEM + csrPEM)
	f.Fuzz(func(t *testing.T, in string) {
		csr, err := pki.ParseCSR("csr", in)
		if err != nil {
			e, ok := errs.As(err)
			if !ok || e.Code != errs.InvalidInput || e.Details["path"] != "csr" {
				t.Fatalf("error %v is not INVALID_INPUT at csr", err)
			}
			if csr != nil {
				t.Fatal("CSR with an error")
			}
			return
		}
		if csr == nil || csr.Request == nil {
			t.Fatal("nil CSR without an error")
		}
		if err := csr.Request.CheckSignature(); err != nil {
			t.Fatalf("accepted a CSR whose signature does not verify: %v", err)
		}
		sum := sha256.Sum256(csr.Request.Raw)
		if csr.Fingerprint != hex.EncodeToString(sum[:]) {
			t.Fatal("fingerprint is not the SHA-256 of the DER")
		}
		if len(in) > pki.MaxPEM {
			t.Fatalf("accepted %d bytes", len(in))
		}
	})
}

// FuzzEKHash: EKHash never panics, fails only with INVALID_INPUT naming the
// path, and returns a lowercase hex SHA-256 that is stable.
func FuzzEKHash(f *testing.F) {
	pub, _, err := pki.NewEK()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pub)
	f.Add(pub[:len(pub)-20])
	f.Fuzz(func(t *testing.T, in string) {
		h, err := pki.EKHash("ek", in)
		if err != nil {
			e, ok := errs.As(err)
			if !ok || e.Code != errs.InvalidInput || e.Details["path"] != "ek" {
				t.Fatalf("error %v is not INVALID_INPUT at ek", err)
			}
			return
		}
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != h {
			t.Fatalf("hash %q is not lowercase hex SHA-256", h)
		}
		if h2, err := pki.EKHash("ek", in); err != nil || h2 != h {
			t.Fatalf("second hash %q %v", h2, err)
		}
	})
}

// FuzzParseAKPublic: the TPMT_PUBLIC parser never panics, fails only with
// INVALID_INPUT naming the path, and whatever it accepts is an AK by the
// rules (restricted signing key fixed to its TPM, RSA 2048 or P-256,
// SHA-256 names), encoded canonically, with the TPM's name for it.
func FuzzParseAKPublic(f *testing.F) {
	mod := make([]byte, 256)
	mod[0] = 0xc3
	rsaAK := tpmsim.AKTemplateRSA
	rsaAK.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: mod})
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	eccAK := tpmsim.AKTemplateECC
	eccAK.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: key.X.FillBytes(make([]byte, 32))},
		Y: tpm2.TPM2BECCParameter{Buffer: key.Y.FillBytes(make([]byte, 32))}})
	for _, p := range []tpm2.TPMTPublic{rsaAK, eccAK, tpm2.RSAEKTemplate, tpm2.ECCEKTemplate} {
		raw := tpm2.Marshal(p)
		f.Add(base64.StdEncoding.EncodeToString(raw))
		f.Add(base64.StdEncoding.EncodeToString(raw[:len(raw)/2]))
		f.Add(base64.StdEncoding.EncodeToString(tpm2.Marshal(tpm2.New2B(p))))
	}
	f.Add("")
	f.Add("AAEACwAFAHI=")
	f.Fuzz(func(t *testing.T, in string) {
		ak, err := pki.ParseAKPublic("evidence.akPublic", in)
		if err != nil {
			e, ok := errs.As(err)
			if !ok || e.Code != errs.InvalidInput || e.Details["path"] != "evidence.akPublic" {
				t.Fatalf("error %v is not INVALID_INPUT at evidence.akPublic", err)
			}
			return
		}
		a := ak.Public.ObjectAttributes
		if !a.Restricted || !a.SignEncrypt || a.Decrypt || !a.FixedTPM || !a.FixedParent || !a.SensitiveDataOrigin ||
			ak.Public.NameAlg != tpm2.TPMAlgSHA256 || (ak.Public.Type != tpm2.TPMAlgRSA && ak.Public.Type != tpm2.TPMAlgECC) {
			t.Fatalf("accepted an AK against the rules: %+v", ak.Public)
		}
		if raw, _ := base64.StdEncoding.DecodeString(in); len(raw) < 8 || binary.BigEndian.Uint32(raw[4:8])&0xfff0f309 != 0 {
			t.Fatal("accepted reserved object attributes")
		}
		if base64.StdEncoding.EncodeToString(tpm2.Marshal(ak.Public)) != in {
			t.Fatal("accepted a non-canonical encoding")
		}
		name, err := tpm2.ObjectName(ak.Public)
		if err != nil || !bytes.Equal(name.Buffer, ak.Name) || len(ak.Name) != 34 {
			t.Fatalf("name %x, want %x (%v)", ak.Name, name, err)
		}
	})
}

// FuzzEKCertificate: the EK certificate reader never panics, fails only
// with INVALID_INPUT naming the path, and accepts only certificates of the
// EK.
func FuzzEKCertificate(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	ek, err := pki.ParseEK("ek", pemOf("PUBLIC KEY", der))
	if err != nil {
		f.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		f.Fatal(err)
	}
	cert := pemOf("CERTIFICATE", certDER)
	f.Add(cert)
	f.Add(cert + cert)
	f.Add(cert[:len(cert)/2])
	f.Add(pemOf("PUBLIC KEY", der))
	f.Fuzz(func(t *testing.T, in string) {
		leaf, inter, err := pki.EKCertificate("evidence.ekCertificate", in, ek)
		if err != nil {
			e, ok := errs.As(err)
			if !ok || e.Code != errs.InvalidInput || e.Details["path"] != "evidence.ekCertificate" {
				t.Fatalf("error %v is not INVALID_INPUT at evidence.ekCertificate", err)
			}
			return
		}
		if !key.PublicKey.Equal(leaf.PublicKey) || len(inter) > 7 {
			t.Fatalf("accepted a certificate of another key, or %d intermediates", len(inter))
		}
		_ = pki.VerifyEKCertificate(leaf, inter, inter)
	})
}
