package pki_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pki"
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
