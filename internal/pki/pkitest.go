package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
)

// NewCSR makes a fresh ECDSA P-256 key and a PEM CSR for it (for tests and
// examples). keyPEM is the key as a PKCS #8 "PRIVATE KEY" block.
func NewCSR(commonName string) (keyPEM, csrPEM string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	if csrPEM, err = CSRFor(key, commonName); err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return keyPEM, csrPEM, nil
}

// CSRFor makes a PEM CSR of key with the given subject (for tests: a new
// CSR of a key that joined already).
func CSRFor(key *ecdsa.PrivateKey, commonName string) (string, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName},
	}, key)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), nil
}

// NewEK makes a fresh ECDSA P-256 public key in PEM "PUBLIC KEY" form, as a
// stand-in for a TPM endorsement key, and its EKHash.
func NewEK() (pubPEM, hash string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	pubPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	hash, err = EKHash("ekPublicKey", pubPEM)
	return pubPEM, hash, err
}
