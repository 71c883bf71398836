// Package pki is the control plane's node public-key infrastructure: the
// certificate authority that signs node client certificates, the parsing of
// the untrusted certificate requests and TPM endorsement keys nodes present,
// and the recognition of placeholder hardware ids.
//
// The CA is generated on first start and kept in server_secrets, so every
// replica signs with the same key. Its private key never leaves this package:
// no function returns it and a CA prints as its certificate's fingerprint.
package pki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/store"
)

// Names of the CA's rows in server_secrets.
const (
	caKeyName  = "node-ca-key"  // PKCS #8 DER
	caCertName = "node-ca-cert" // certificate DER
)

// CACommonName is the subject common name of the generated CA.
const CACommonName = "Better Compute node CA"

// caValidity is how long a generated CA is valid.
const caValidityYears = 10

// clockSkew back-dates NotBefore so that nodes whose clocks run a little
// behind accept a certificate issued just now.
const clockSkew = 5 * time.Minute

// NodeURIPrefix prefixes the node id in a node certificate's URI SAN.
const NodeURIPrefix = "urn:bettercompute:node:"

// CA is the control plane's node certificate authority.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM string
}

// CertificatePEM is the CA certificate in PEM form, for nodes to trust.
func (c *CA) CertificatePEM() string { return c.certPEM }

// String names the CA by its certificate's SHA-256, so that printing or
// logging a CA never shows its key.
func (c *CA) String() string {
	sum := sha256.Sum256(c.cert.Raw)
	return "node CA " + hex.EncodeToString(sum[:])
}

// GoString is String, for %#v.
func (c *CA) GoString() string { return c.String() }

// Load returns the persisted CA, creating it on first use (ECDSA P-256,
// self-signed, CN "Better Compute node CA", 10 years, CA with path length 0
// that may sign certificates and CRLs).
//
// Replicas starting at once each generate a candidate and insert key and
// certificate in one statement with ON CONFLICT DO NOTHING, then read back
// what is stored: the first commit wins and everyone uses it. A key without
// its certificate (or the reverse) is never written; finding one is an error
// rather than a reason to make a new CA.
func Load(ctx context.Context, db *store.DB) (*CA, error) {
	ca, err := read(ctx, db)
	if err != nil || ca != nil {
		return ca, err
	}
	keyDER, certDER, err := generate()
	if err != nil {
		return nil, err
	}
	err = db.Tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO server_secrets (name, value) VALUES ($1, $2), ($3, $4)
			ON CONFLICT (name) DO NOTHING`, caKeyName, keyDER, caCertName, certDER)
		if err != nil {
			return store.Wrap(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return store.Wrap(err)
		}
		if n != 0 && n != 2 {
			// Only one of the two was free: rolling back keeps ours out.
			return errIncomplete
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ca, err = read(ctx, db)
	if err == nil && ca == nil {
		err = errors.New("pki: node CA missing after it was stored")
	}
	return ca, err
}

var errIncomplete = errors.New("pki: server_secrets holds only one of node-ca-key and node-ca-cert; restore both or delete both")

// Read returns the stored CA read through q (a transaction's own
// connection), nil when none is stored yet.
func Read(ctx context.Context, q store.Q) (*CA, error) { return read(ctx, q) }

// read returns the stored CA, nil when there is none.
func read(ctx context.Context, q store.Q) (*CA, error) {
	var rows []struct {
		Name  string `db:"name"`
		Value []byte `db:"value"`
	}
	if err := q.SelectContext(ctx, &rows, `SELECT name, value FROM server_secrets WHERE name IN ($1, $2)`,
		caKeyName, caCertName); err != nil {
		return nil, store.Wrap(err)
	}
	var keyDER, certDER []byte
	for _, r := range rows {
		switch r.Name {
		case caKeyName:
			keyDER = r.Value
		case caCertName:
			certDER = r.Value
		}
	}
	switch {
	case keyDER == nil && certDER == nil:
		return nil, nil
	case keyDER == nil || certDER == nil:
		return nil, errIncomplete
	}
	return decode(keyDER, certDER)
}

// decode checks that a stored key and certificate form a usable CA.
func decode(keyDER, certDER []byte) (*CA, error) {
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("pki: stored node CA key: %w", err)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: stored node CA key is a %T, not a signer", k)
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("pki: stored node CA certificate: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("pki: stored node CA key does not match its certificate")
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("pki: stored node CA certificate may not sign certificates")
	}
	certPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	return &CA{cert: cert, key: key, certPEM: certPEM}, nil
}

// generate makes a new CA key (PKCS #8 DER) and self-signed certificate (DER).
func generate() (keyDER, certDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: CACommonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.AddDate(caValidityYears, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	certDER, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: self-sign CA: %w", err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: encode CA key: %w", err)
	}
	return keyDER, certDER, nil
}

// randomSerial is a random positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("pki: serial number: %w", err)
		}
		if n := new(big.Int).SetBytes(b); n.Sign() > 0 {
			return n, nil
		}
	}
}

// Sign issues a client certificate for the CSR's public key: subject CN =
// nodeID, one URI SAN "urn:bettercompute:node:<nodeID>", client
// authentication only, a random 128-bit serial, valid from five minutes ago
// for validity. Nothing else of the CSR (subject, extensions) is copied.
// A certificate never outlives the CA: NotAfter is capped at the CA's.
// notAfter is the certificate's NotAfter as encoded (whole seconds, UTC).
func (c *CA) Sign(csr *CSR, nodeID string, validity time.Duration) (certPEM string, notAfter time.Time, err error) {
	if csr == nil || csr.Request == nil {
		return "", time.Time{}, errors.New("pki: Sign without a CSR")
	}
	if !validNodeID(nodeID) {
		return "", time.Time{}, fmt.Errorf("pki: node id %q cannot name a certificate", nodeID)
	}
	if validity <= 0 {
		return "", time.Time{}, fmt.Errorf("pki: validity %v is not positive", validity)
	}
	uri, err := url.Parse(NodeURIPrefix + nodeID)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("pki: node URI: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return "", time.Time{}, err
	}
	now := time.Now()
	end := now.Add(validity)
	if end.After(c.cert.NotAfter) {
		end = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: nodeID},
		URIs:                  []*url.URL{uri},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              end,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, csr.Request.PublicKey, c.key)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("pki: sign node certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("pki: parse signed node certificate: %w", err)
	}
	if !bytes.Equal(cert.RawIssuer, c.cert.RawSubject) {
		return "", time.Time{}, errors.New("pki: signed certificate does not name the CA as issuer")
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), cert.NotAfter, nil
}

// validNodeID accepts what can stand in a URN and a CN unescaped: ASCII
// letters, digits and "-._", at most 64 characters (the CN limit).
func validNodeID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return false
		}
	}
	return true
}
