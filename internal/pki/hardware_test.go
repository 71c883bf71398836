package pki_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/pki"
)

func bigOne() *big.Int { return big.NewInt(1) }

func TestPlaceholderUUID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"00000000-0000-0000-0000-000000000000", true},
		{"00000000000000000000000000000000", true},
		{"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", true},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", true},
		{"FfFfFfFf-fFfF-FFFF-ffff-FFFFffffFFFF", true},
		{"ffffffffffffffffffffffffffffffff", true},
		{" {FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF}\n", true},
		{"03000200-0400-0500-0006-000700080009", true},
		{"03000200040005000006000700080009", true},
		{"00020003-0004-0005-0006-000700080009", true},
		{"4C4C4544-0000-2010-8020-80C04F202020", true},
		{"11111111-1111-1111-1111-111111111111", true},
		{"", true},
		{"   ", true},
		{"Not Settable", true},
		{"Not Present", true},
		{"To Be Filled By O.E.M.", true},

		{"4c4c4544-0046-4310-8057-b4c04f4a3333", false},
		{"4C4C4544-0046-4310-8057-B4C04F4A3333", false},
		{"4c4c4544004643108057b4c04f4a3333", false},
		{"0b8a3c2e-7f1d-4e4a-9d6b-2f3e5a7c9d01", false},
		{"00000000-0000-0000-0000-000000000001", false},
		{"ec2a7bd6-1d5f-2a37-0b2d-f5f6b40c0a77", false},
	} {
		if got := pki.PlaceholderUUID(tc.in); got != tc.want {
			t.Errorf("PlaceholderUUID(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPlaceholderSerial(t *testing.T) {
	for _, s := range []string{
		"To Be Filled By O.E.M.", "To be filled by O.E.M.", "TO BE FILLED BY O.E.M.", "To Be Filled By O.E.M",
		"  to be filled by o.e.m.  ", "Default string", "DEFAULT STRING", "0123456789", "System Serial Number",
		"system serial number", "Not Specified", "None", "none", "N/A", "n/a", "0", "00000000", "123456789",
		"Chassis Serial Number", "Base Board Serial Number", "Not Applicable", "xxxxxxxxxx", "XXXXXXXX", "",
		" ", "\t\n", "000", "0000000000000000", "FFFFFFFF", "ffff", "F", "X", "xXxX", "FXFX", "0000-0000",
		"1111111111", "Unknown", "Not Available",
	} {
		if !pki.PlaceholderSerial(s) {
			t.Errorf("PlaceholderSerial(%q) = false", s)
		}
	}
	for _, s := range []string{
		"J8KX3T2", "j8kx3t2", "C02XK1JHJG5J", "CZ1234ABCD", "PF2ABCDE", "MXQ12345YZ", "5CG1234XYZ", "SN12345",
		"00000001", "F0", "XF1", "10", "ABC", "111", "Default string 2",
	} {
		if pki.PlaceholderSerial(s) {
			t.Errorf("PlaceholderSerial(%q) = true", s)
		}
	}
}

func TestPlaceholders(t *testing.T) {
	for _, tc := range []struct {
		uuid, serial string
		want         []string
	}{
		{"4c4c4544-0046-4310-8057-b4c04f4a3333", "J8KX3T2", []string{}},
		{"03000200-0400-0500-0006-000700080009", "J8KX3T2", []string{"systemUuid"}},
		{"4c4c4544-0046-4310-8057-b4c04f4a3333", "To Be Filled By O.E.M.", []string{"serial"}},
		{"00000000-0000-0000-0000-000000000000", "Default string", []string{"systemUuid", "serial"}},
	} {
		got := pki.Placeholders(tc.uuid, tc.serial)
		if got == nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Placeholders(%q, %q) = %#v, want %#v", tc.uuid, tc.serial, got, tc.want)
		}
	}
}

func pkixPEM(t testing.TB, pub crypto.PublicKey) (string, []byte) {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("PUBLIC KEY", der), der
}

func TestEKHash(t *testing.T) {
	for name, key := range map[string]crypto.Signer{
		"ecdsa p256": ecKey(t, elliptic.P256()),
		"ecdsa p384": ecKey(t, elliptic.P384()),
		"rsa 2048":   rsaKey(t, 2048),
	} {
		t.Run(name, func(t *testing.T) {
			p, der := pkixPEM(t, key.Public())
			got, err := pki.EKHash("ekPublicKey", p)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(der)
			if got != hex.EncodeToString(sum[:]) {
				t.Errorf("hash %s", got)
			}
		})
	}

	pub, hash, err := pki.NewEK()
	if err != nil {
		t.Fatal(err)
	}
	if h, err := pki.EKHash("ek", "\n"+pub+"\n"); err != nil || h != hash {
		t.Errorf("NewEK hash %s, EKHash %s %v", hash, h, err)
	}
	pub2, hash2, err := pki.NewEK()
	if err != nil {
		t.Fatal(err)
	}
	if pub2 == pub || hash2 == hash {
		t.Error("NewEK repeats itself")
	}
}

func TestEKHashInvalid(t *testing.T) {
	ecPEM, ecDER := pkixPEM(t, ecKey(t, elliptic.P256()).Public())
	edPEM, _ := pkixPEM(t, ed25519Key(t).Public())
	rsa1024, _ := pkixPEM(t, rsaKey(t, 1024).Public())
	p224, _ := pkixPEM(t, ecKey(t, elliptic.P224()).Public())
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	certDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: bigOne()}, &x509.Certificate{SerialNumber: bigOne()}, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"empty":            "",
		"junk":             "junk",
		"truncated":        ecPEM[:len(ecPEM)/2],
		"wrong type":       pemOf("RSA PUBLIC KEY", ecDER),
		"certificate":      pemOf("CERTIFICATE", certDER),
		"cert as key":      pemOf("PUBLIC KEY", certDER),
		"two blocks":       ecPEM + ecPEM,
		"trailing garbage": ecPEM + "x",
		"leading garbage":  "x\n" + ecPEM,
		"over 16 KiB":      ecPEM + strings.Repeat("\n", 16<<10),
		"ed25519":          edPEM,
		"rsa 1024":         rsa1024,
		"p224":             p224,
		"csr":              mustCSR(t),
		"not der":          pemOf("PUBLIC KEY", []byte{0x30, 0x03, 0x01, 0x01}),
	} {
		t.Run(name, func(t *testing.T) {
			h, err := pki.EKHash("ekPublicKey", in)
			if err == nil {
				t.Fatalf("accepted, hash %s", h)
			}
			wantInvalid(t, err, "ekPublicKey")
		})
	}
}
