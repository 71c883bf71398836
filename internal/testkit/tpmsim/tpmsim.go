// Package tpmsim is the machine side of the tpm attestor in tests: the
// reference TPM 2.0 implementation (Microsoft's, through go-tpm-tools'
// simulator, built with cgo) making endorsement and attestation keys and
// running TPM2_ActivateCredential on the blobs the server sends. Nothing in
// it fakes the TPM: a credential made for another TPM does not activate.
//
// The simulator is one per process: Open blocks while another test holds
// it, so tests that use it keep it briefly.
package tpmsim

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"testing"

	"github.com/google/go-tpm-tools/simulator"
	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpmutil"
)

// TPM is an open simulator, manufactured from a fixed seed: the same seed
// makes the same TPM (the same endorsement keys) again.
type TPM struct {
	t   testing.TB
	sim *simulator.Simulator
}

// Open manufactures and starts the simulator from seed; it is closed at the
// test's end (or by Close).
func Open(t testing.TB, seed int64) *TPM {
	t.Helper()
	sim, err := simulator.GetWithFixedSeedInsecure(seed)
	if err != nil {
		t.Fatalf("tpmsim: %v", err)
	}
	x := &TPM{t: t, sim: sim}
	t.Cleanup(x.Close)
	return x
}

// Close stops the simulator and lets the next Open in.
func (x *TPM) Close() {
	if !x.sim.IsClosed() {
		_ = x.sim.Close()
	}
}

// Send implements go-tpm's transport.TPM.
func (x *TPM) Send(cmd []byte) ([]byte, error) { return tpmutil.RunCommandRaw(x.sim, cmd) }

// Key is an object loaded in the TPM.
type Key struct {
	Handle tpm2.TPMHandle
	Name   tpm2.TPM2BName
	Public *tpm2.TPMTPublic
}

// PublicB64 is base64 of the key's TPMT_PUBLIC (nodes.join's akPublic).
func (k *Key) PublicB64() string { return base64.StdEncoding.EncodeToString(tpm2.Marshal(k.Public)) }

// PEM is the key's public half as a PEM "PUBLIC KEY" (nodes.join's
// ekPublicKey).
func (k *Key) PEM() string {
	var pub any
	var err error
	switch k.Public.Type {
	case tpm2.TPMAlgRSA:
		parms, _ := k.Public.Parameters.RSADetail()
		mod, _ := k.Public.Unique.RSA()
		pub, err = tpm2.RSAPub(parms, mod)
	case tpm2.TPMAlgECC:
		parms, _ := k.Public.Parameters.ECCDetail()
		pt, _ := k.Public.Unique.ECC()
		pub, err = tpm2.ECDSAPub(parms, pt)
	default:
		err = fmt.Errorf("key type %v", k.Public.Type)
	}
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// Primary creates a primary object from template in hierarchy (the EK:
// tpm2.RSAEKTemplate or tpm2.ECCEKTemplate in tpm2.TPMRHEndorsement; an
// AK: AKTemplateRSA or AKTemplateECC). The same seed and template give the
// same key.
func (x *TPM) Primary(hierarchy tpm2.TPMHandle, template tpm2.TPMTPublic) *Key {
	x.t.Helper()
	rsp, err := tpm2.CreatePrimary{PrimaryHandle: hierarchy, InPublic: tpm2.New2B(template)}.Execute(x)
	if err != nil {
		objects, sessions := x.Loaded()
		x.t.Fatalf("tpmsim: create primary (loaded: objects %v, sessions %v): %v", objects, sessions, err)
	}
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		x.t.Fatalf("tpmsim: %v", err)
	}
	return &Key{Handle: rsp.ObjectHandle, Name: rsp.Name, Public: pub}
}

// EK creates the endorsement key from the TCG default template: "rsa"
// (RSA 2048) or "ecc" (P-256).
func (x *TPM) EK(alg string) *Key {
	x.t.Helper()
	if alg == "ecc" {
		return x.Primary(tpm2.TPMRHEndorsement, tpm2.ECCEKTemplate)
	}
	return x.Primary(tpm2.TPMRHEndorsement, tpm2.RSAEKTemplate)
}

// AK creates an attestation key from template in the endorsement
// hierarchy.
func (x *TPM) AK(template tpm2.TPMTPublic) *Key {
	x.t.Helper()
	return x.Primary(tpm2.TPMRHEndorsement, template)
}

// Activate runs TPM2_ActivateCredential with ak as the activated object
// and ek as the key, on the base64 TPM2B_ID_OBJECT and
// TPM2B_ENCRYPTED_SECRET the server sent, and returns the recovered secret.
// The TPM refuses a credential made for another EK or another object name.
func (x *TPM) Activate(ak, ek *Key, credentialBlob, encryptedSecret string) ([]byte, error) {
	blob, err := sized[tpm2.TPM2BIDObject](credentialBlob)
	if err != nil {
		return nil, fmt.Errorf("credentialBlob: %w", err)
	}
	secret, err := sized[tpm2.TPM2BEncryptedSecret](encryptedSecret)
	if err != nil {
		return nil, fmt.Errorf("encryptedSecret: %w", err)
	}
	rsp, err := tpm2.ActivateCredential{
		ActivateHandle: tpm2.AuthHandle{Handle: ak.Handle, Name: ak.Name, Auth: tpm2.PasswordAuth(nil)},
		KeyHandle: tpm2.AuthHandle{Handle: ek.Handle, Name: ek.Name,
			Auth: tpm2.Policy(tpm2.TPMAlgSHA256, 16, func(t transport.TPM, s tpm2.TPMISHPolicy, nonce tpm2.TPM2BNonce) error {
				// The EK's policy: PolicySecret(TPM_RH_ENDORSEMENT).
				_, err := tpm2.PolicySecret{AuthHandle: tpm2.TPMRHEndorsement, PolicySession: s, NonceTPM: nonce}.Execute(t)
				return err
			})},
		CredentialBlob: *blob,
		Secret:         *secret,
	}.Execute(x)
	if err != nil {
		return nil, err
	}
	return rsp.CertInfo.Buffer, nil
}

// sized decodes base64 of a TPM2B structure: its 2-byte big-endian size,
// then exactly that many bytes.
func sized[T tpm2.Marshallable, P interface {
	*T
	tpm2.Unmarshallable
}](b64 string) (*T, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, err
	}
	v, err := tpm2.Unmarshal[T, P](raw)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(tpm2.Marshal(*v), raw) {
		return nil, fmt.Errorf("not exactly one TPM2B structure (%d bytes)", len(raw))
	}
	return v, nil
}

// AK templates: restricted signing keys with fixedTPM, fixedParent and
// sensitiveDataOrigin (what tpm2_createak makes).
var (
	AKTemplateRSA = tpm2.TPMTPublic{
		Type:    tpm2.TPMAlgRSA,
		NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true,
			UserWithAuth: true, Restricted: true, SignEncrypt: true},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
			Scheme: tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgRSASSA,
				Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgRSASSA, &tpm2.TPMSSigSchemeRSASSA{HashAlg: tpm2.TPMAlgSHA256})},
			KeyBits: 2048,
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: make([]byte, 256)}),
	}
	AKTemplateECC = tpm2.TPMTPublic{
		Type:    tpm2.TPMAlgECC,
		NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true,
			UserWithAuth: true, Restricted: true, SignEncrypt: true},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
			Scheme: tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgECDSA,
				Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256})},
			CurveID: tpm2.TPMECCNistP256,
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
			X: tpm2.TPM2BECCParameter{Buffer: make([]byte, 32)}, Y: tpm2.TPM2BECCParameter{Buffer: make([]byte, 32)}}),
	}
)

// Loaded lists the transient objects and sessions loaded (for tests of the
// helper itself).
func (x *TPM) Loaded() (objects, sessions []tpm2.TPMHandle) {
	for _, c := range []struct {
		first uint32
		out   *[]tpm2.TPMHandle
	}{{0x80000000, &objects}, {0x02000000, &sessions}, {0x03000000, &sessions}} {
		rsp, err := tpm2.GetCapability{Capability: tpm2.TPMCapHandles, Property: c.first, PropertyCount: 64}.Execute(x)
		if err != nil {
			x.t.Fatalf("tpmsim: %v", err)
		}
		h, _ := rsp.CapabilityData.Data.Handles()
		*c.out = append(*c.out, h.Handle...)
	}
	return objects, sessions
}
