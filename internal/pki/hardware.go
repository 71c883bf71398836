package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/bettercompute/computed/internal/errs"
)

// EKHash parses a TPM endorsement public key (one PEM "PUBLIC KEY" block,
// PKIX SubjectPublicKeyInfo; RSA 2048..8192 bits or ECDSA P-256, P-384 or
// P-521) and returns the lowercase hex SHA-256 of its DER
// SubjectPublicKeyInfo. The key is re-encoded before hashing, so the hash
// is that of the canonical encoding (what `openssl pkey -pubin -outform DER`
// prints), whatever equivalent encoding the caller sent. Anything else is
// INVALID_INPUT naming path.
func EKHash(path, pemText string) (string, error) {
	der, err := onePEM(path, pemText, "PUBLIC KEY", "endorsement key")
	if err != nil {
		return "", err
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return "", errs.Invalid(path, "endorsement key is not a valid PKIX public key")
	}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
			return "", errs.Invalid(path, "endorsement key is RSA %d bits; want %d to %d", bits, MinRSABits, MaxRSABits)
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() && k.Curve != elliptic.P521() {
			return "", errs.Invalid(path, "endorsement key is ECDSA on %s; want P-256, P-384 or P-521", curveName(k.Curve))
		}
	default:
		return "", errs.Invalid(path, "endorsement key must be RSA or ECDSA")
	}
	canon, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", errs.Invalid(path, "endorsement key cannot be encoded")
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// Field names Placeholders reports.
const (
	FieldSystemUUID = "systemUuid"
	FieldSerial     = "serial"
)

// Placeholders returns the names of the hardware ids ("systemUuid",
// "serial") that are well-known placeholders firmware ships when the vendor
// did not fill them in; empty (not nil) when none are.
func Placeholders(systemUUID, serial string) []string {
	out := []string{}
	if PlaceholderUUID(systemUUID) {
		out = append(out, FieldSystemUUID)
	}
	if PlaceholderSerial(serial) {
		out = append(out, FieldSerial)
	}
	return out
}

// placeholderUUIDs are UUIDs many machines share, written as 32 lowercase
// hex digits.
var placeholderUUIDs = map[string]bool{
	// AMI firmware default, as Linux prints it (SMBIOS 2.6+ byte order) ...
	"03000200040005000006000700080009": true,
	// ... and in the byte order of older SMBIOS readers.
	"00020003000400050006000700080009": true,
	// Dell: "DELL" followed by an empty service tag.
	"4c4c454400002010802080c04f202020": true,
}

// PlaceholderUUID reports a system UUID that identifies no machine: all zero
// or all F (any case, with or without dashes or braces), any one hex digit
// repeated, the well-known firmware defaults such as
// 03000200-0400-0500-0006-000700080009, and the text some tools print
// instead of a UUID (empty, "Not Settable", "Not Present", "To Be Filled By
// O.E.M." and the other serial placeholders).
func PlaceholderUUID(s string) bool {
	c := compact(s)
	if placeholderUUIDs[c] {
		return true
	}
	return placeholderText(c)
}

// placeholderSerials are placeholder serials after compact (lowercase,
// letters and digits only).
var placeholderSerials = map[string]bool{}

func init() {
	for _, s := range []string{
		"To Be Filled By O.E.M.", "To be filled by O.E.M.", "To Be Filled By OEM", "OEM", "O.E.M.",
		"Default string", "Default", "Default Serial Number",
		"System Serial Number", "System Serial#", "Chassis Serial Number", "Base Board Serial Number",
		"Board Serial Number", "Serial Number",
		"Not Specified", "Unspecified", "Not Applicable", "Not Available", "Not Present", "Not Settable",
		"Unknown", "None", "N/A",
		"0123456789", "123456789", "1234567890", "xxxxxxxxxx",
	} {
		placeholderSerials[compact(s)] = true
	}
}

// PlaceholderMAC says whether a MAC address (aa:bb:cc:dd:ee:ff, either
// case) identifies no machine: all zeros, or a group address (the least
// significant bit of the first octet set; ff:ff:ff:ff:ff:ff is one), which
// no network card has as its own.
func PlaceholderMAC(m string) bool {
	c := compact(m)
	if len(c) != 12 || strings.Trim(c, "0") == "" {
		return true
	}
	first, err := strconv.ParseUint(c[:2], 16, 8)
	return err != nil || first&1 == 1
}

// PlaceholderSerial reports a serial number that identifies no machine,
// compared case-insensitively and ignoring spaces and punctuation: the
// strings firmware ships unfilled ("To Be Filled By O.E.M.", "Default
// string", "System Serial Number", "Not Specified", "None", "N/A",
// "0123456789", ...), the empty string, strings made only of zeros or only
// of 'F'/'X' characters, and one character repeated.
func PlaceholderSerial(s string) bool {
	return placeholderText(compact(s))
}

func placeholderText(c string) bool {
	if c == "" || placeholderSerials[c] {
		return true
	}
	fx, same := true, true
	for i := 0; i < len(c); i++ {
		if c[i] != 'f' && c[i] != 'x' {
			fx = false
		}
		if c[i] != c[0] {
			same = false
		}
	}
	// Only zeros (any length, "0" included), only F/X, or one character
	// repeated often enough that no vendor would assign it.
	return fx || (same && (c[0] == '0' || len(c) >= 4))
}

// compact lowercases s and keeps only ASCII letters and digits, so that
// "To be filled by O.E.M" and "TO BE FILLED BY O.E.M." compare equal and
// UUIDs compare with or without dashes and braces.
func compact(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteByte(c)
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		}
	}
	return b.String()
}
