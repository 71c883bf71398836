package nodes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"time"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
)

// The tpm attestor proves that the machine holds the TPM whose endorsement
// key (EK) it names, by credential activation (as SPIRE's TPM node
// attestor and Keylime do): the first nodes.join presents the EK and an
// attestation key (AK) and is answered with a challenge, a fresh secret
// encrypted to the EK for the AK's name (TPM2_MakeCredential); only that
// TPM, with that AK loaded, recovers it (TPM2_ActivateCredential). The
// second nodes.join answers with the secret, and the attestor decides as
// for any join: the EK's allow-list admits, anything else defers.

// Challenge rules.
const (
	// ChallengeTTL is how long a challenge waits for its answer.
	ChallengeTTL = 5 * time.Minute
	// MaxOpenChallenges bounds the unanswered, unexpired challenges of one
	// join token; past it, nodes.join is RATE_LIMITED until one expires
	// or is answered.
	MaxOpenChallenges = 32
	// StatusChallenge is nodes.join's answer to the tpm attestor's first call.
	StatusChallenge = "challenge"
)

// Reasons a challenge's answer is refused (details.reason of the
// UNAUTHENTICATED error).
const (
	ChallengeUnknown  = "challenge-unknown"
	ChallengeUsed     = "challenge-used"
	ChallengeExpired  = "challenge-expired"
	ChallengeMismatch = "challenge-mismatch"
	ChallengeWrong    = "wrong-secret"
)

// tpmEvidence is the tpm attestor's evidence, checked: the first call's
// keys (ek, ak, the optional EK certificate) or the second call's answer
// (challengeID, secret, and optionally the keys again, which must be the
// challenge's).
type tpmEvidence struct {
	ek            *pki.EK
	ak            *pki.AK
	ekCert        *x509.Certificate
	intermediates []*x509.Certificate

	challengeID string
	secret      []byte
}

func (t *tpmEvidence) answer() bool { return t.challengeID != "" }

// parseTPMEvidence checks the shape and content of the tpm attestor's
// evidence; every problem is INVALID_INPUT naming the field.
func parseTPMEvidence(ev *Evidence) (*tpmEvidence, error) {
	if ev == nil {
		return nil, errs.Invalid("evidence.ekPublicKey", "the tpm attestor needs evidence.ekPublicKey and evidence.akPublic (or, answering a challenge, evidence.challengeId and evidence.activatedSecret)")
	}
	t := &tpmEvidence{}
	if ev.ChallengeID != nil || ev.ActivatedSecret != nil {
		switch {
		case ev.ChallengeID == nil:
			return nil, errs.Invalid("evidence.challengeId", "evidence.activatedSecret goes with the challengeId it answers")
		case ev.ActivatedSecret == nil:
			return nil, errs.Invalid("evidence.activatedSecret", "answering a challenge takes evidence.activatedSecret")
		case ev.EKCertificate != nil:
			return nil, errs.Invalid("evidence.ekCertificate", "evidence.ekCertificate goes with the first call, not with the answer")
		}
		secret, err := pki.ParseActivatedSecret("evidence.activatedSecret", *ev.ActivatedSecret)
		if err != nil {
			return nil, err
		}
		t.challengeID, t.secret = *ev.ChallengeID, secret
	} else if ev.EKPublicKey == nil {
		return nil, errs.Invalid("evidence.ekPublicKey", "the tpm attestor needs evidence.ekPublicKey")
	}
	if ev.EKPublicKey != nil {
		ek, err := pki.ParseEK("evidence.ekPublicKey", *ev.EKPublicKey)
		if err != nil {
			return nil, err
		}
		t.ek = ek
	}
	if ev.AKPublic == nil && !t.answer() {
		return nil, errs.Invalid("evidence.akPublic", "the tpm attestor needs evidence.akPublic, the attestation key's TPMT_PUBLIC (base64), to make a challenge for")
	}
	if ev.AKPublic != nil {
		ak, err := pki.ParseAKPublic("evidence.akPublic", *ev.AKPublic)
		if err != nil {
			return nil, err
		}
		t.ak = ak
	}
	if ev.EKCertificate != nil {
		if t.ek == nil {
			return nil, errs.Invalid("evidence.ekPublicKey", "evidence.ekCertificate goes with evidence.ekPublicKey")
		}
		leaf, inter, err := pki.EKCertificate("evidence.ekCertificate", *ev.EKCertificate, t.ek)
		if err != nil {
			return nil, err
		}
		t.ekCert, t.intermediates = leaf, inter
	}
	return t, nil
}

// challenge makes a challenge for the first call's keys, bound to the
// token, the CSR, the hardware ids, the EK and the AK. It spends no use of
// the token. Called with the token row locked, so the bound on open
// challenges holds under concurrent calls.
func (s *service) challenge(ctx context.Context, q store.Q, tok *tokenRow, csr *pki.CSR, hw Hardware, t *tpmEvidence) (*JoinResult, error) {
	// Answered and expired challenges of the token go; the open ones are bounded.
	if _, err := q.ExecContext(ctx, `DELETE FROM tpm_challenges WHERE tenant_id = $1 AND join_token_id = $2 AND (used_at IS NOT NULL OR expires_at <= now())`,
		tok.TenantID, tok.JoinTokenID); err != nil {
		return nil, store.Wrap(err)
	}
	var open struct {
		N    int             `db:"n"`
		Wait sql.NullFloat64 `db:"wait"`
	}
	if err := q.GetContext(ctx, &open, `SELECT count(*) AS n, extract(epoch FROM min(expires_at) - now())::float8 AS wait
		FROM tpm_challenges WHERE tenant_id = $1 AND join_token_id = $2`, tok.TenantID, tok.JoinTokenID); err != nil {
		return nil, store.Wrap(err)
	}
	if open.N >= MaxOpenChallenges {
		secs := max(1, int(math.Ceil(open.Wait.Float64)))
		return nil, errs.E(errs.RateLimited, "the join token has %d unanswered TPM challenges, the most it may have; answer one, or retry in %d s when the oldest expires",
			open.N, secs).With("reason", "open-challenges").With("limit", MaxOpenChallenges).With("retryAfterSeconds", secs)
	}
	cas, err := chainedCAs(ctx, q, tok.PoolID, t)
	if err != nil {
		return nil, err
	}
	cred, err := pki.MakeCredential(t.ek, t.ak.Name)
	if err != nil {
		return nil, err
	}
	id := ids.New(ids.Challenge)
	sum := sha256.Sum256(cred.Secret)
	hb, _ := json.Marshal(hw)
	var expires time.Time
	err = q.GetContext(ctx, &expires, `INSERT INTO tpm_challenges (challenge_id, join_token_id, csr_fingerprint, hardware, ek_hash, ak_name,
			ek_ca_hashes, secret_hash, expires_at, tenant_id)
		VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8, now() + make_interval(secs => $9), $10) RETURNING expires_at`,
		id, tok.JoinTokenID, csr.Fingerprint, string(hb), t.ek.Hash, t.ak.Name, cas, sum[:], int(ChallengeTTL/time.Second), tok.TenantID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	expires = expires.UTC()
	b64 := base64.StdEncoding.EncodeToString
	return &JoinResult{Status: StatusChallenge, PoolID: tok.PoolID, ChallengeID: id,
		CredentialBlob: b64(cred.CredentialBlob), EncryptedSecret: b64(cred.EncryptedSecret), ExpiresAt: &expires}, nil
}

// chainedCAs returns the hashes of the pool's allow-listed CA certificates
// that the machine's EK certificate chains to (none without a certificate).
func chainedCAs(ctx context.Context, q store.Q, poolID string, t *tpmEvidence) ([]string, error) {
	out := []string{}
	if t.ekCert == nil {
		return out, nil
	}
	var rows []struct {
		Hash string `db:"ek_hash"`
		DER  []byte `db:"certificate"`
	}
	if err := q.SelectContext(ctx, &rows, `SELECT ek_hash, certificate FROM tpm_allowed_keys WHERE pool_id = $1 AND kind = 'ca'`, poolID); err != nil {
		return nil, store.Wrap(err)
	}
	for _, r := range rows {
		ca, err := x509.ParseCertificate(r.DER)
		if err != nil {
			continue // stored only after parsing: cannot happen
		}
		if pki.VerifyEKCertificate(t.ekCert, t.intermediates, []*x509.Certificate{ca}) {
			out = append(out, r.Hash)
		}
	}
	return out, nil
}

// provenEK is what an answered challenge proved: the machine holds the EK
// (its hash), and which allow-listed CAs its certificate chained to.
type provenEK struct {
	ekHash   string
	caHashes []string
}

func challengeRefused(reason, format string, args ...any) error {
	return errs.E(errs.Unauthenticated, format, args...).With("reason", reason)
}

// prove checks the answer to a challenge and spends the challenge. Any
// mismatch with what the challenge is bound to, a spent or expired
// challenge, or a wrong secret is UNAUTHENTICATED, and a wrong answer or a
// mismatch spends the challenge too, in the join's transaction, which
// commits the spend though the join is refused (registry.KeepWrites). The
// challenge's row is locked as it is read: answers to one challenge, through
// any token, are decided one at a time, and each after the first finds the
// challenge spent.
func prove(ctx context.Context, q store.Q, tok *tokenRow, csr *pki.CSR, hw Hardware, t *tpmEvidence) (*provenEK, error) {
	var c struct {
		SameToken  bool   `db:"same_token"`
		SameCSR    bool   `db:"same_csr"`
		Hardware   string `db:"hardware"`
		EKHash     string `db:"ek_hash"`
		AKName     []byte `db:"ak_name"`
		CAHashes   string `db:"ek_ca_hashes"`
		SecretHash []byte `db:"secret_hash"`
		Used       bool   `db:"used"`
		Expired    bool   `db:"expired"`
	}
	err := q.GetContext(ctx, &c, `SELECT join_token_id = $2 AS same_token, csr_fingerprint = $3 AS same_csr,
			hardware::text AS hardware, ek_hash, ak_name, array_to_json(ek_ca_hashes)::text AS ek_ca_hashes, secret_hash,
			used_at IS NOT NULL AS used, expires_at <= clock_timestamp() AS expired
		FROM tpm_challenges WHERE tenant_id = $4 AND challenge_id = $1 FOR UPDATE`, t.challengeID, tok.JoinTokenID, csr.Fingerprint, tok.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, challengeRefused(ChallengeUnknown, "no open challenge %s: it was answered, has expired, or was never made; start again with the keys", t.challengeID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	// Compared as join requests compare them (sameHardware: the MACs in
	// any order); the stored ids were normalized by the first call.
	var asked Hardware
	if err := json.Unmarshal([]byte(c.Hardware), &asked); err != nil {
		return nil, err
	}
	switch {
	case c.Used:
		return nil, challengeRefused(ChallengeUsed, "challenge %s was already answered; start again with the keys", t.challengeID)
	case c.Expired:
		return nil, challengeRefused(ChallengeExpired, "challenge %s has expired; start again with the keys", t.challengeID)
	}
	// From here the answer spends the challenge, whatever it is.
	if _, err := q.ExecContext(ctx, `UPDATE tpm_challenges SET used_at = clock_timestamp() WHERE tenant_id = $2 AND challenge_id = $1`, t.challengeID, tok.TenantID); err != nil {
		return nil, store.Wrap(err)
	}
	spent := func(reason, format string) error {
		return registry.KeepWrites(challengeRefused(reason, format, t.challengeID))
	}
	switch {
	case !c.SameToken:
		return nil, spent(ChallengeMismatch, "challenge %s was made for another join token")
	case !c.SameCSR:
		return nil, spent(ChallengeMismatch, "challenge %s was made for another CSR")
	case !sameHardware(asked, hw):
		return nil, spent(ChallengeMismatch, "challenge %s was made for other hardware ids")
	case t.ek != nil && t.ek.Hash != c.EKHash:
		return nil, spent(ChallengeMismatch, "challenge %s was made for another endorsement key")
	case t.ak != nil && !bytes.Equal(t.ak.Name, c.AKName):
		return nil, spent(ChallengeMismatch, "challenge %s was made for another attestation key")
	}
	sum := sha256.Sum256(t.secret)
	if subtle.ConstantTimeCompare(sum[:], c.SecretHash) != 1 {
		return nil, spent(ChallengeWrong, "the activated secret does not answer challenge %s; start again with the keys")
	}
	p := &provenEK{ekHash: c.EKHash}
	if err := json.Unmarshal([]byte(c.CAHashes), &p.caHashes); err != nil {
		return nil, err
	}
	return p, nil
}
