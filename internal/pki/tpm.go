package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/google/go-tpm/tpm2"

	"github.com/bettercompute/computed/internal/errs"
)

// TPM credential activation (TPM 2.0 Library, Part 1, "Credential
// Protection"): the server encrypts a fresh secret to the machine's
// endorsement key (EK) for the name of an attestation key (AK); only the TPM
// that holds the EK's private half, with an object of exactly that name
// loaded, recovers it with TPM2_ActivateCredential. The AK's attributes
// (fixedTPM) say the object cannot have left the TPM it was made in.

// Sizes of the TPM structures nodes.join reads.
const (
	// MaxAKPublic bounds the decoded TPMT_PUBLIC of an AK (an RSA 2048 one
	// with a SHA-512 policy digest is under 400 bytes).
	MaxAKPublic = 1024
	// SecretSize is the size of the secret a challenge carries (the most a
	// SHA-256 EK's TPM2B_DIGEST credential may hold).
	SecretSize = 32
)

// AK is an attestation key's public area that passed AKPublic's checks.
type AK struct {
	Public *tpm2.TPMTPublic
	// Name is the TPM Name: the name algorithm (SHA-256) and the digest of
	// the public area, as TPM2_ActivateCredential computes it for the
	// loaded object.
	Name []byte
}

// ParseAKPublic decodes untrusted base64 (standard alphabet, padded) of an
// AK's public area in TPM wire format (TPMT_PUBLIC: what go-tpm's Marshal
// and `tpm2_readpublic -f tpmt` write) and checks that it is a restricted
// signing key with fixedTPM, fixedParent and sensitiveDataOrigin, that it
// cannot decrypt, that it is RSA 2048 or ECC NIST P-256 with a public key of
// that size, and that its name algorithm is SHA-256. The encoding must be
// the canonical one, with nothing after it. Every rejection is
// INVALID_INPUT naming path.
func ParseAKPublic(path, b64 string) (*AK, error) {
	raw, err := decodeB64(path, b64, MaxAKPublic, "akPublic")
	if err != nil {
		return nil, err
	}
	pub, err := unmarshalPublic(raw)
	if err != nil {
		return nil, errs.Invalid(path, "akPublic is not a TPMT_PUBLIC structure")
	}
	if pub.NameAlg != tpm2.TPMAlgSHA256 {
		return nil, errs.Invalid(path, "the attestation key's name algorithm is %s; want SHA-256", algName(pub.NameAlg))
	}
	// TPMA_OBJECT's reserved bits (0, 3, 8-9, 12-15, 20-31): a TPM loads
	// no key that sets one. The attributes follow the type and name
	// algorithm (2 bytes each) in the canonical encoding checked above.
	if reserved := binary.BigEndian.Uint32(raw[4:8]) & 0xfff0f309; reserved != 0 {
		return nil, errs.Invalid(path, "the attestation key's object attributes set reserved bits (0x%08x)", reserved)
	}
	a := pub.ObjectAttributes
	for _, c := range []struct {
		ok   bool
		what string
	}{
		{a.Restricted, "it is not restricted"},
		{a.SignEncrypt, "it is not a signing key"},
		{!a.Decrypt, "it is a decryption key"},
		{a.FixedTPM, "it is not fixedTPM"},
		{a.FixedParent, "it is not fixedParent"},
		{a.SensitiveDataOrigin, "it is not sensitiveDataOrigin"},
	} {
		if !c.ok {
			return nil, errs.Invalid(path, "the attestation key must be a restricted signing key with fixedTPM, fixedParent and sensitiveDataOrigin; %s", c.what)
		}
	}
	switch pub.Type {
	case tpm2.TPMAlgRSA:
		parms, err := pub.Parameters.RSADetail()
		if err != nil {
			return nil, errs.Invalid(path, "akPublic is not a TPMT_PUBLIC structure")
		}
		mod, err := pub.Unique.RSA()
		if err != nil {
			return nil, errs.Invalid(path, "akPublic is not a TPMT_PUBLIC structure")
		}
		if parms.KeyBits != 2048 {
			return nil, errs.Invalid(path, "the attestation key is RSA %d bits; want RSA 2048 or ECC P-256", parms.KeyBits)
		}
		if err := signingParms(path, parms.Symmetric.Algorithm, parms.Scheme.Scheme, tpm2.TPMAlgNull, tpm2.TPMAlgRSASSA, tpm2.TPMAlgRSAPSS); err != nil {
			return nil, err
		}
		if len(mod.Buffer) != 256 || mod.Buffer[0]&0x80 == 0 {
			return nil, errs.Invalid(path, "the attestation key's RSA modulus is not 2048 bits long, as its keyBits say")
		}
	case tpm2.TPMAlgECC:
		parms, err := pub.Parameters.ECCDetail()
		if err != nil {
			return nil, errs.Invalid(path, "akPublic is not a TPMT_PUBLIC structure")
		}
		pt, err := pub.Unique.ECC()
		if err != nil {
			return nil, errs.Invalid(path, "akPublic is not a TPMT_PUBLIC structure")
		}
		if parms.CurveID != tpm2.TPMECCNistP256 {
			return nil, errs.Invalid(path, "the attestation key is on ECC curve 0x%04x; want RSA 2048 or ECC P-256", uint16(parms.CurveID))
		}
		if err := signingParms(path, parms.Symmetric.Algorithm, parms.Scheme.Scheme, parms.KDF.Scheme,
			tpm2.TPMAlgECDSA, tpm2.TPMAlgECSchnorr, tpm2.TPMAlgECDAA, tpm2.TPMAlgSM2); err != nil {
			return nil, err
		}
		if !onP256(pt.X.Buffer, pt.Y.Buffer) {
			return nil, errs.Invalid(path, "the attestation key's public point is not on P-256")
		}
	default:
		return nil, errs.Invalid(path, "the attestation key is of type %s; want RSA 2048 or ECC P-256", algName(pub.Type))
	}
	name, err := tpm2.ObjectName(pub)
	if err != nil {
		return nil, errs.Invalid(path, "akPublic is not a TPMT_PUBLIC structure")
	}
	return &AK{Public: pub, Name: name.Buffer}, nil
}

// signingParms refuses a restricted signing key's parameters that a TPM
// does not create such a key with: a symmetric algorithm (a storage key's),
// a key derivation function, or a scheme other than a signing one (OAEP,
// ECDH; none at all).
func signingParms(path string, symmetric, scheme, kdf tpm2.TPMAlgID, signing ...tpm2.TPMAlgID) error {
	switch {
	case symmetric != tpm2.TPMAlgNull:
		return errs.Invalid(path, "the attestation key has a symmetric algorithm (%s); a signing key has none", algName(symmetric))
	case kdf != tpm2.TPMAlgNull:
		return errs.Invalid(path, "the attestation key has a key derivation function (%s); a signing key has none", algName(kdf))
	case !slices.Contains(signing, scheme):
		return errs.Invalid(path, "the attestation key's scheme is %s; a restricted signing key's is a signing scheme", algName(scheme))
	}
	return nil
}

// unmarshalPublic decodes a TPMT_PUBLIC and accepts it only when encoding
// it again gives the same bytes: nothing trails it and no field has two
// encodings, so the name computed here is the one the TPM computes from
// these bytes. go-tpm's decoder returns errors for short input; a panic
// would be a bug there, and is an error here.
func unmarshalPublic(raw []byte) (pub *tpm2.TPMTPublic, err error) {
	defer func() {
		if r := recover(); r != nil {
			pub, err = nil, fmt.Errorf("tpm2: %v", r)
		}
	}()
	pub, err = tpm2.Unmarshal[tpm2.TPMTPublic](raw)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(tpm2.Marshal(pub), raw) {
		return nil, fmt.Errorf("tpm2: not the canonical encoding")
	}
	return pub, nil
}

// onP256 reports whether x, y (big-endian, at most 32 bytes each) are the
// coordinates of a point on P-256.
func onP256(x, y []byte) bool {
	if len(x) == 0 || len(x) > 32 || len(y) == 0 || len(y) > 32 {
		return false
	}
	b := make([]byte, 65)
	b[0] = 4
	copy(b[1+32-len(x):33], x)
	copy(b[33+32-len(y):], y)
	_, err := ecdh.P256().NewPublicKey(b)
	return err == nil
}

// EK is an endorsement key a credential can be made for.
type EK struct {
	// Hash is EKHash of the key: the allow-list's key.
	Hash string
	// Public is the key's public area under the TCG default EK template
	// (RSA 2048 or ECC P-256, SHA-256 name algorithm, AES-128-CFB), the
	// template `tpm2_createek` and the TCG EK Credential Profile use.
	Public *tpm2.TPMTPublic
	key    any
}

// ParseEK parses an endorsement public key for credential activation: one
// PEM "PUBLIC KEY" block (PKIX), RSA 2048 with exponent 65537 or ECDSA
// P-256, the keys of the TCG default EK templates whose symmetric and name
// algorithms MakeCredential must use. Every rejection is INVALID_INPUT
// naming path.
func ParseEK(path, pemText string) (*EK, error) {
	der, err := onePEM(path, pemText, "PUBLIC KEY", "endorsement key")
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errs.Invalid(path, "endorsement key is not a valid PKIX public key")
	}
	// The attestor's own rule first: EKHash's wider one (any key an
	// allow-list may name) answered an RSA 1024 EK "want 2048 to 8192".
	ek, err := ekFromKey(path, "", key)
	if err != nil {
		return nil, err
	}
	if ek.Hash, err = EKHash(path, pemText); err != nil {
		return nil, err
	}
	return ek, nil
}

func ekFromKey(path, hash string, key any) (*EK, error) {
	var pub tpm2.TPMTPublic
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() != 2048 || k.E != 65537 {
			return nil, errs.Invalid(path, "the endorsement key is RSA %d bits with exponent %d; the tpm attestor takes RSA 2048 (exponent 65537) or ECC P-256 (the TCG default EK templates)", k.N.BitLen(), k.E)
		}
		pub = tpm2.RSAEKTemplate
		pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: k.N.FillBytes(make([]byte, 256))})
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, errs.Invalid(path, "the endorsement key is ECDSA on %s; the tpm attestor takes RSA 2048 or ECC P-256 (the TCG default EK templates)", curveName(k.Curve))
		}
		pub = tpm2.ECCEKTemplate
		pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
			X: tpm2.TPM2BECCParameter{Buffer: k.X.FillBytes(make([]byte, 32))},
			Y: tpm2.TPM2BECCParameter{Buffer: k.Y.FillBytes(make([]byte, 32))},
		})
	default:
		return nil, errs.Invalid(path, "the endorsement key must be RSA 2048 or ECC P-256")
	}
	return &EK{Hash: hash, Public: &pub, key: key}, nil
}

// Credential is what TPM2_MakeCredential makes for an AK against an EK.
type Credential struct {
	// Secret is the random value only the TPM recovers.
	Secret []byte
	// CredentialBlob is a TPM2B_ID_OBJECT and EncryptedSecret a
	// TPM2B_ENCRYPTED_SECRET: each with its 2-byte big-endian size first,
	// as TPM2_ActivateCredential takes them.
	CredentialBlob  []byte
	EncryptedSecret []byte
}

// MakeCredential encrypts a fresh SecretSize-byte secret to ek for the AK
// named akName (TPM2_MakeCredential, computed here rather than by a TPM).
func MakeCredential(ek *EK, akName []byte) (*Credential, error) {
	encap, err := tpm2.ImportEncapsulationKey(ek.Public)
	if err != nil {
		return nil, fmt.Errorf("pki: import EK: %w", err)
	}
	secret := make([]byte, SecretSize)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	idObject, encSecret, err := tpm2.CreateCredential(rand.Reader, encap, akName, secret)
	if err != nil {
		return nil, fmt.Errorf("pki: make credential: %w", err)
	}
	// go-tpm returns the structures' contents; the TPM takes them sized.
	return &Credential{
		Secret:          secret,
		CredentialBlob:  tpm2.Marshal(tpm2.TPM2BIDObject{Buffer: idObject}),
		EncryptedSecret: tpm2.Marshal(tpm2.TPM2BEncryptedSecret{Buffer: encSecret}),
	}, nil
}

// ParseActivatedSecret decodes the secret a machine recovered (base64 of
// the TPM2B_DIGEST's contents: at most MaxActivatedSecret bytes).
// Anything else is INVALID_INPUT naming path. A secret of another length
// than the challenge's (SecretSize) is a wrong answer, not a malformed one:
// the challenge's check refuses it (wrong-secret) and spends the challenge,
// as it does a wrong secret of the right length.
func ParseActivatedSecret(path, b64 string) ([]byte, error) {
	return decodeB64(path, b64, MaxActivatedSecret, "activatedSecret")
}

// MaxActivatedSecret is the most an activated secret may be: a SHA-384
// digest, past the SecretSize (32) of the challenges made here (the method
// surface's bound, 64 base64 characters, is its encoding).
const MaxActivatedSecret = 48

// EKCertificate parses the EK certificate a machine sent: PEM
// "CERTIFICATE" blocks, the EK's certificate first and any intermediates
// after it (at most 16 KiB in all), and checks that the first certifies
// ek. Every rejection is INVALID_INPUT naming path.
func EKCertificate(path, pemText string, ek *EK) (leaf *x509.Certificate, intermediates []*x509.Certificate, err error) {
	certs, err := parseCerts(path, pemText, 8)
	if err != nil {
		return nil, nil, err
	}
	if !samePublicKey(certs[0].PublicKey, ek.key) {
		return nil, nil, errs.Invalid(path, "the EK certificate is not for evidence.ekPublicKey")
	}
	return certs[0], certs[1:], nil
}

// ParseCACertificate parses one PEM "CERTIFICATE" block of a CA (a TPM
// manufacturer's root or intermediate) and returns it with the lowercase
// hex SHA-256 of its DER. Every rejection is INVALID_INPUT naming path.
func ParseCACertificate(path, pemText string) (*x509.Certificate, string, error) {
	certs, err := parseCerts(path, pemText, 1)
	if err != nil {
		return nil, "", err
	}
	c := certs[0]
	if !c.IsCA || !c.BasicConstraintsValid {
		return nil, "", errs.Invalid(path, "the certificate is not a CA certificate (basicConstraints cA)")
	}
	sum := sha256.Sum256(c.Raw)
	return c, fmt.Sprintf("%x", sum[:]), nil
}

// VerifyEKCertificate reports whether leaf chains to one of roots through
// intermediates. EK certificates carry the TCG EK usage
// (2.23.133.8.1), not a Go-known extended key usage, so any usage is
// taken; critical extensions Go does not know (TCG attributes) are left to
// the chain's issuer.
func VerifyEKCertificate(leaf *x509.Certificate, intermediates, roots []*x509.Certificate) bool {
	if len(roots) == 0 {
		return false
	}
	rp, ip := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots {
		rp.AddCert(r)
	}
	for _, c := range intermediates {
		ip.AddCert(c)
	}
	l := *leaf
	l.UnhandledCriticalExtensions = nil
	_, err := l.Verify(x509.VerifyOptions{Roots: rp, Intermediates: ip, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

func parseCerts(path, pemText string, max int) ([]*x509.Certificate, error) {
	ders, err := pemBlocks(path, pemText, "CERTIFICATE", "certificate", max)
	if err != nil {
		return nil, err
	}
	certs := make([]*x509.Certificate, 0, len(ders))
	for i, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, errs.Invalid(path, "certificate %d is not a valid X.509 certificate", i+1)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

func samePublicKey(a, b any) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	x, ok := a.(equaler)
	return ok && b != nil && x.Equal(b)
}

func decodeB64(path, s string, max int, what string) ([]byte, error) {
	if len(s) > base64.StdEncoding.EncodedLen(max) {
		return nil, errs.Invalid(path, "%s is over %d bytes", what, max)
	}
	// Go's decoder skips CR and LF even when strict: only the encoding of
	// the bytes decoded is one.
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || base64.StdEncoding.EncodeToString(b) != s {
		return nil, errs.Invalid(path, "%s is not base64 (standard alphabet, padded)", what)
	}
	if len(b) == 0 {
		return nil, errs.Invalid(path, "%s is empty", what)
	}
	if len(b) > max {
		// The encoded length lets a byte or two more through (65 bytes
		// encode in as many characters as 64).
		return nil, errs.Invalid(path, "%s is over %d bytes", what, max)
	}
	return b, nil
}

func algName(a tpm2.TPMAlgID) string {
	switch a {
	case tpm2.TPMAlgRSA:
		return "RSA"
	case tpm2.TPMAlgECC:
		return "ECC"
	case tpm2.TPMAlgSHA1:
		return "SHA-1"
	case tpm2.TPMAlgSHA256:
		return "SHA-256"
	case tpm2.TPMAlgSHA384:
		return "SHA-384"
	case tpm2.TPMAlgSHA512:
		return "SHA-512"
	case tpm2.TPMAlgKeyedHash:
		return "keyedHash"
	case tpm2.TPMAlgSymCipher:
		return "symCipher"
	case tpm2.TPMAlgNull:
		return "none"
	case tpm2.TPMAlgAES:
		return "AES"
	case tpm2.TPMAlgOAEP:
		return "OAEP"
	case tpm2.TPMAlgRSAES:
		return "RSAES"
	case tpm2.TPMAlgECDH:
		return "ECDH"
	}
	return fmt.Sprintf("0x%04x", uint16(a))
}
