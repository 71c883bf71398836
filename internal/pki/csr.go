package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"strings"

	"github.com/bettercompute/computed/internal/errs"
)

// MaxPEM bounds the PEM text ParseCSR and EKHash read.
const MaxPEM = 16 << 10

// Bounds of the RSA keys a CSR may carry.
const (
	MinRSABits = 2048
	MaxRSABits = 8192
)

// CSR is a parsed certificate request whose signature verified.
type CSR struct {
	Request *x509.CertificateRequest
	// Fingerprint is the lowercase hex SHA-256 of the CSR's DER: the same
	// key in another CSR has another fingerprint.
	Fingerprint string
	// KeyFingerprint is the lowercase hex SHA-256 of the CSR's public key
	// (its SubjectPublicKeyInfo DER): the same in every CSR of the key.
	KeyFingerprint string
}

// KeyFingerprint is the lowercase hex SHA-256 of a SubjectPublicKeyInfo's
// DER, as CSR.KeyFingerprint and a certificate's key have it.
func KeyFingerprint(spki []byte) string {
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:])
}

// ParseCSR parses untrusted PEM text: exactly one "CERTIFICATE REQUEST"
// block with no headers and nothing but whitespace around it, at most 16 KiB
// in all, holding a PKCS #10 request whose signature verifies (SHA-1 and
// weaker signatures are refused) over an ECDSA P-256 or P-384, Ed25519 or
// RSA 2048..8192-bit key. Every rejection is INVALID_INPUT naming path.
func ParseCSR(path, pemText string) (*CSR, error) {
	der, err := onePEM(path, pemText, "CERTIFICATE REQUEST", "CSR")
	if err != nil {
		return nil, err
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, errs.Invalid(path, "CSR is not a valid PKCS #10 certificate request")
	}
	if err := csrKey(path, req); err != nil {
		return nil, err
	}
	switch req.SignatureAlgorithm {
	case x509.SHA1WithRSA, x509.ECDSAWithSHA1, x509.DSAWithSHA1, x509.MD5WithRSA, x509.MD2WithRSA:
		return nil, errs.Invalid(path, "CSR is signed with %s; use SHA-256 or stronger", req.SignatureAlgorithm)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, errs.Invalid(path, "CSR signature does not verify with its public key")
	}
	sum := sha256.Sum256(req.Raw)
	return &CSR{Request: req, Fingerprint: hex.EncodeToString(sum[:]), KeyFingerprint: KeyFingerprint(req.RawSubjectPublicKeyInfo)}, nil
}

// csrKey accepts the key types nodes may use.
func csrKey(path string, req *x509.CertificateRequest) error {
	switch k := req.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return errs.Invalid(path, "CSR key is ECDSA on %s; use P-256 or P-384", curveName(k.Curve))
	case ed25519.PublicKey:
		if len(k) == ed25519.PublicKeySize {
			return nil
		}
	case *rsa.PublicKey:
		if k.N == nil {
			break
		}
		bits := k.N.BitLen()
		if bits >= MinRSABits && bits <= MaxRSABits {
			return nil
		}
		return errs.Invalid(path, "CSR key is RSA %d bits; use %d to %d bits", bits, MinRSABits, MaxRSABits)
	}
	return errs.Invalid(path, "CSR key must be ECDSA P-256 or P-384, Ed25519, or RSA %d to %d bits", MinRSABits, MaxRSABits)
}

func curveName(c elliptic.Curve) string {
	if c == nil || c.Params() == nil {
		return "an unknown curve"
	}
	return c.Params().Name
}

// onePEM returns the DER of the single PEM block of the wanted type that
// text holds. what names the thing in messages.
func onePEM(path, text, wantType, what string) ([]byte, error) {
	ders, err := pemBlocks(path, text, wantType, what, 1)
	if err != nil {
		return nil, err
	}
	return ders[0], nil
}

// pemBlocks returns the DER of the 1..max PEM blocks of the wanted type
// that text holds, with nothing but whitespace around and between them.
func pemBlocks(path, text, wantType, what string, max int) ([][]byte, error) {
	if len(text) > MaxPEM {
		return nil, errs.Invalid(path, "%s is larger than %d KiB", what, MaxPEM>>10)
	}
	rest := strings.TrimLeft(text, " \t\r\n")
	if !strings.HasPrefix(rest, "-----BEGIN ") {
		return nil, errs.Invalid(path, "%s must be PEM text starting with -----BEGIN %s-----", what, wantType)
	}
	var ders [][]byte
	for {
		block, after := pem.Decode([]byte(rest))
		if block == nil {
			return nil, errs.Invalid(path, "%s is not well-formed PEM", what)
		}
		if block.Type != wantType {
			if t := printable(block.Type); t != "" {
				return nil, errs.Invalid(path, "%s PEM block is %q; want %q", what, t, wantType)
			}
			return nil, errs.Invalid(path, "%s PEM block is not %q", what, wantType)
		}
		if len(block.Headers) != 0 {
			return nil, errs.Invalid(path, "%s PEM block must not have headers", what)
		}
		ders = append(ders, block.Bytes)
		rest = strings.TrimSpace(string(after))
		if rest == "" {
			return ders, nil
		}
		if !strings.HasPrefix(rest, "-----BEGIN") {
			return nil, errs.Invalid(path, "%s has data after its PEM block", what)
		}
		if len(ders) == max {
			if max == 1 {
				return nil, errs.Invalid(path, "%s must be exactly one PEM block", what)
			}
			return nil, errs.Invalid(path, "%s is more than %d PEM blocks", what, max)
		}
	}
}

// printable returns s when it is short printable ASCII fit to echo back.
func printable(s string) string {
	if len(s) > 40 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return ""
		}
	}
	return s
}
