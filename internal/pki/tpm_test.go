package pki_test

import (
	"bytes"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit/tpmsim"
)

// The server's credential, made here in Go, activates in the reference TPM
// for every EK and AK type the attestor takes, and only there: another TPM
// with the same AK template cannot recover it, nor can the same TPM for
// another object.
func TestMakeCredentialActivatesInARealTPM(t *testing.T) {
	x := tpmsim.Open(t, 1)
	for _, ekAlg := range []string{"rsa", "ecc"} {
		ek := x.EK(ekAlg)
		e, err := pki.ParseEK("ek", ek.PEM())
		if err != nil {
			t.Fatal(err)
		}
		// The EK template rebuilt from the PEM has the TPM's own name.
		if n, _ := tpm2.ObjectName(e.Public); !bytes.Equal(n.Buffer, ek.Name.Buffer) {
			t.Fatalf("%s: EK template name %x, TPM's %x", ekAlg, n.Buffer, ek.Name.Buffer)
		}
		for akName, tmpl := range map[string]tpm2.TPMTPublic{"rsa": tpmsim.AKTemplateRSA, "ecc": tpmsim.AKTemplateECC} {
			ak := x.AK(tmpl)
			a, err := pki.ParseAKPublic("ak", ak.PublicB64())
			if err != nil {
				t.Fatalf("%s AK: %v", akName, err)
			}
			if !bytes.Equal(a.Name, ak.Name.Buffer) {
				t.Fatalf("AK name %x, TPM's %x", a.Name, ak.Name.Buffer)
			}
			c, err := pki.MakeCredential(e, a.Name)
			if err != nil {
				t.Fatal(err)
			}
			// Both blobs are TPM2B: the size, big-endian, then the rest.
			for _, b := range [][]byte{c.CredentialBlob, c.EncryptedSecret} {
				if int(binary.BigEndian.Uint16(b)) != len(b)-2 {
					t.Fatalf("blob size prefix %d for %d bytes", binary.BigEndian.Uint16(b), len(b)-2)
				}
			}
			b64 := base64.StdEncoding.EncodeToString
			got, err := x.Activate(ak, ek, b64(c.CredentialBlob), b64(c.EncryptedSecret))
			if err != nil {
				t.Fatalf("EK %s, AK %s: activate: %v", ekAlg, akName, err)
			}
			if !bytes.Equal(got, c.Secret) || len(got) != pki.SecretSize {
				t.Fatalf("activated %x, want %x", got, c.Secret)
			}
			// Another object of the same TPM is not the AK the credential
			// names.
			otherTmpl := tpmsim.AKTemplateECC
			if akName == "ecc" {
				otherTmpl = tpmsim.AKTemplateRSA
			}
			other := x.AK(otherTmpl)
			if _, err := x.Activate(other, ek, b64(c.CredentialBlob), b64(c.EncryptedSecret)); err == nil {
				t.Fatal("a credential activated for another object")
			}
			flush(t, x, ak, other)
		}
		flush(t, x, ek)
	}
	// Another TPM, with the first one's EK public key in hand, cannot.
	victim := x.EK("rsa")
	e, _ := pki.ParseEK("ek", victim.PEM())
	x.Close()
	y := tpmsim.Open(t, 2)
	ak := y.AK(tpmsim.AKTemplateRSA)
	own := y.EK("rsa")
	if own.PEM() == victim.PEM() {
		t.Fatal("two seeds made the same EK")
	}
	c, _ := pki.MakeCredential(e, ak.Name.Buffer)
	b64 := base64.StdEncoding.EncodeToString
	if _, err := y.Activate(ak, own, b64(c.CredentialBlob), b64(c.EncryptedSecret)); err == nil {
		t.Fatal("another TPM activated a credential made for the first one's EK")
	}
}

func flush(t *testing.T, x *tpmsim.TPM, keys ...*tpmsim.Key) {
	for _, k := range keys {
		if _, err := (tpm2.FlushContext{FlushHandle: k.Handle}).Execute(x); err != nil {
			t.Fatal(err)
		}
	}
}

// AK rules: every rejection is INVALID_INPUT at the path, with the rule in
// the message.
func TestParseAKPublicRules(t *testing.T) {
	enc := func(p tpm2.TPMTPublic) string { return base64.StdEncoding.EncodeToString(tpm2.Marshal(p)) }
	withRSAKey := func(p tpm2.TPMTPublic) tpm2.TPMTPublic {
		mod := make([]byte, 256)
		mod[0] = 0xc1
		p.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: mod})
		return p
	}
	good := withRSAKey(tpmsim.AKTemplateRSA)
	if _, err := pki.ParseAKPublic("ak", enc(good)); err != nil {
		t.Fatalf("good AK: %v", err)
	}
	attrs := func(f func(a *tpm2.TPMAObject)) string {
		p := good
		f(&p.ObjectAttributes)
		return enc(p)
	}
	rsa3072 := good
	rsa3072.Parameters = tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
		Scheme: tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgRSASSA,
			Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgRSASSA, &tpm2.TPMSSigSchemeRSASSA{HashAlg: tpm2.TPMAlgSHA256})},
		KeyBits: 3072})
	shortMod := good // keyBits 2048, a modulus of 1024 bits
	shortMod.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: append([]byte{0xc1}, make([]byte, 127)...)})
	zeroMod := good // keyBits 2048, a modulus of zeros
	zeroMod.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: make([]byte, 256)})
	sha1 := good
	sha1.NameAlg = tpm2.TPMAlgSHA1
	p384 := tpmsim.AKTemplateECC
	p384.Parameters = tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{CurveID: tpm2.TPMECCNistP384,
		Scheme: tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgECDSA,
			Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256})}})
	offCurve := tpmsim.AKTemplateECC // the template's unique is the point (0, 0)
	goodRaw := tpm2.Marshal(good)
	// A reserved attribute bit (31, then 0): a TPM loads no such key.
	reserved := func(bit uint) string {
		raw := append([]byte{}, goodRaw...)
		binary.BigEndian.PutUint32(raw[4:8], binary.BigEndian.Uint32(raw[4:8])|1<<bit)
		return base64.StdEncoding.EncodeToString(raw)
	}
	rsaParms := func(sym tpm2.TPMTSymDefObject, scheme tpm2.TPMTRSAScheme) string {
		p := good
		p.Parameters = tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{Symmetric: sym, Scheme: scheme, KeyBits: 2048})
		return enc(p)
	}
	nullSym := tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull}
	aes := tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgAES, KeyBits: tpm2.NewTPMUSymKeyBits(tpm2.TPMAlgAES, tpm2.TPMKeyBits(128)),
		Mode: tpm2.NewTPMUSymMode(tpm2.TPMAlgAES, tpm2.TPMAlgCFB)}
	rsassa := tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgRSASSA, Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgRSASSA, &tpm2.TPMSSigSchemeRSASSA{HashAlg: tpm2.TPMAlgSHA256})}
	oaep := tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgOAEP, Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgOAEP, &tpm2.TPMSEncSchemeOAEP{HashAlg: tpm2.TPMAlgSHA256})}
	if _, err := pki.ParseAKPublic("ak", rsaParms(nullSym, rsassa)); err != nil {
		t.Fatalf("the good AK's parameters, rebuilt: %v", err)
	}
	for _, tc := range []struct {
		name, in, msg string
	}{
		{"not restricted", attrs(func(a *tpm2.TPMAObject) { a.Restricted = false }), "not restricted"},
		{"not fixedTPM", attrs(func(a *tpm2.TPMAObject) { a.FixedTPM = false }), "not fixedTPM"},
		{"not fixedParent", attrs(func(a *tpm2.TPMAObject) { a.FixedParent = false }), "not fixedParent"},
		{"not sensitiveDataOrigin", attrs(func(a *tpm2.TPMAObject) { a.SensitiveDataOrigin = false }), "not sensitiveDataOrigin"},
		{"not signing", attrs(func(a *tpm2.TPMAObject) { a.SignEncrypt = false }), "it is not a signing key"},
		{"decrypts", attrs(func(a *tpm2.TPMAObject) { a.Decrypt = true }), "it is a decryption key"},
		{"rsa 3072", enc(rsa3072), "RSA 3072"},
		{"a short modulus", enc(shortMod), "modulus is not 2048 bits long"},
		{"a modulus of zeros", enc(zeroMod), "modulus is not 2048 bits long"},
		{"sha1 name", enc(sha1), "SHA-1"},
		{"p384", enc(p384), "curve"},
		{"off curve", enc(offCurve), "not on P-256"},
		{"keyed hash", enc(tpm2.TPMTPublic{Type: tpm2.TPMAlgKeyedHash, NameAlg: tpm2.TPMAlgSHA256, ObjectAttributes: good.ObjectAttributes,
			Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgKeyedHash, &tpm2.TPMSKeyedHashParms{}),
			Unique:     tpm2.NewTPMUPublicID(tpm2.TPMAlgKeyedHash, &tpm2.TPM2BDigest{})}), "keyedHash"},
		{"reserved bit 31", reserved(31), "reserved bits"},
		{"reserved bit 0", reserved(0), "reserved bits"},
		{"a symmetric algorithm", rsaParms(aes, rsassa), "symmetric algorithm (AES)"},
		{"an encryption scheme", rsaParms(nullSym, oaep), "scheme is OAEP"},
		{"no scheme", rsaParms(nullSym, tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgNull}), "scheme is none"},
		{"trailing bytes", base64.StdEncoding.EncodeToString(append(append([]byte{}, goodRaw...), 0)), "not a TPMT_PUBLIC"},
		{"short", base64.StdEncoding.EncodeToString(goodRaw[:len(goodRaw)-1]), "not a TPMT_PUBLIC"},
		{"sized (TPM2B_PUBLIC)", base64.StdEncoding.EncodeToString(tpm2.Marshal(tpm2.New2B(good))), "not a TPMT_PUBLIC"},
		{"not base64", "%%%", "not base64"},
		{"unpadded", strings.TrimRight(enc(good), "="), "not base64"},
		{"empty", "", "empty"},
		{"huge", strings.Repeat("A", 4096), "over"},
	} {
		_, err := pki.ParseAKPublic("evidence.akPublic", tc.in)
		e, ok := errs.As(err)
		if !ok || e.Code != errs.InvalidInput || e.Details["path"] != "evidence.akPublic" || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestParseEKTakesTheDefaultTemplatesKeys(t *testing.T) {
	ecPEM, _, _ := pki.NewEK()
	if _, err := pki.ParseEK("ek", ecPEM); err != nil {
		t.Fatalf("P-256: %v", err)
	}
	p384, _ := pkixPEM(t, ecKey(t, elliptic.P384()).Public())
	rsa3072, _ := pkixPEM(t, rsaKey(t, 3072).Public())
	rsa1024, _ := pkixPEM(t, rsaKey(t, 1024).Public())
	for _, in := range []string{p384, rsa3072, rsa1024, "junk"} {
		_, err := pki.ParseEK("evidence.ekPublicKey", in)
		if e, ok := errs.As(err); !ok || e.Code != errs.InvalidInput || e.Details["path"] != "evidence.ekPublicKey" {
			t.Errorf("%.30q: %v", in, err)
		}
		// Every key refused in the attestor's words (an RSA 1024 EK was
		// told "want 2048 to 8192", which 3072 then is not).
		if in != "junk" && (err == nil || !strings.Contains(err.Error(), "RSA 2048") || strings.Contains(err.Error(), "8192")) {
			t.Errorf("%.30q: %v", in, err)
		}
	}
}

func TestParseActivatedSecret(t *testing.T) {
	s := make([]byte, pki.SecretSize)
	if b, err := pki.ParseActivatedSecret("s", base64.StdEncoding.EncodeToString(s)); err != nil || len(b) != pki.SecretSize {
		t.Fatal(err)
	}
	// Another length is a wrong answer, which the challenge's check
	// refuses (and spends the challenge for): it parses.
	for _, n := range []int{1, 16, 33, pki.MaxActivatedSecret} {
		if b, err := pki.ParseActivatedSecret("s", base64.StdEncoding.EncodeToString(make([]byte, n))); err != nil || len(b) != n {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
	for _, in := range []string{"", base64.StdEncoding.EncodeToString(make([]byte, pki.MaxActivatedSecret+1)), "****", "AAA"} {
		if _, err := pki.ParseActivatedSecret("s", in); errs.CodeOf(err) != errs.InvalidInput {
			t.Errorf("%q: %v", in, err)
		}
	}
}

// BenchmarkMakeCredential: the server's cost of one challenge (RSA-OAEP or
// ECDH to the EK, KDFa, AES-CFB, HMAC).
func BenchmarkMakeCredential(b *testing.B) {
	rsaPEM, _ := pkixPEM(b, rsaKey(b, 2048).Public())
	ecPEM, _, _ := pki.NewEK()
	name := make([]byte, 34)
	for alg, p := range map[string]string{"rsa2048": rsaPEM, "p256": ecPEM} {
		ek, err := pki.ParseEK("ek", p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg, func(b *testing.B) {
			for b.Loop() {
				if _, err := pki.MakeCredential(ek, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
