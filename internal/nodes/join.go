package nodes

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Join request states and lifetimes.
const (
	Pending  = "pending"
	Approved = "approved"
	Consumed = "consumed"
	Denied   = "denied"
	Expired  = "expired"

	// PendingTTL is how long a deferred join waits for a decision;
	// ApprovedTTL is how long an approval waits for the machine's retry.
	PendingTTL  = 7 * 24 * time.Hour
	ApprovedTTL = 24 * time.Hour
	// MaxPendingRequests bounds the pending, unexpired join requests one
	// join token has made: a deferred join spends no use, so a token's
	// holder could fill its pool's queue for the token's whole lifetime.
	// Past it nodes.join defers nothing through the token (RATE_LIMITED)
	// until the owner decides one or the oldest expires.
	MaxPendingRequests = 256
	// pendingPoll bounds the retryAfterSeconds of that refusal.
	pendingPoll = 5 * time.Minute
	// CertValidity is the lifetime of a node certificate.
	CertValidity = 365 * 24 * time.Hour
)

// Reasons a join is deferred.
const (
	ReasonPlaceholder  = "placeholder-hardware"
	ReasonUnknown      = "unknown-machine"
	ReasonEKNotAllowed = "ek-not-allowed"
)

// Hardware is the identity a machine presents.
type Hardware struct {
	SystemUUID string   `json:"systemUuid" doc:"The system UUID the machine presented (all zeros or all Fs is a placeholder that names no machine)."`
	Serial     string   `json:"serial" doc:"The serial number the machine presented."`
	MACs       []string `json:"macs" doc:"The MAC addresses the machine presented."`
}

// Evidence is what an attestor needs beyond the hardware ids: for tpm, the
// first call's keys (ekPublicKey, akPublic, ekCertificate) or the second
// call's answer to the challenge (challengeId, activatedSecret).
type Evidence struct {
	EKPublicKey     *string `json:"ekPublicKey,omitempty"`
	AKPublic        *string `json:"akPublic,omitempty"`
	EKCertificate   *string `json:"ekCertificate,omitempty"`
	ChallengeID     *string `json:"challengeId,omitempty"`
	ActivatedSecret *string `json:"activatedSecret,omitempty"`
}

// JoinInput is nodes.join's input; the join token is the credential.
type JoinInput struct {
	JoinToken string    `json:"joinToken"`
	CSR       string    `json:"csr"`
	Hardware  Hardware  `json:"hardware"`
	Attestor  string    `json:"attestor"`
	Evidence  *Evidence `json:"evidence,omitempty"`
	Name      *string   `json:"name,omitempty"`
}

// Reason says why a join was deferred.
type Reason struct {
	Code    string `json:"code" schema:"JoinReasonCode" doc:"Why the join was deferred: placeholder hardware ids, a machine the discovery attestor does not know, or an endorsement key the pool does not allow."`
	Message string `json:"message" doc:"The reason in words."`
}

// JoinResult is nodes.join's output: admitted with a node, a certificate and
// a credential; pending with the join request that waits for approval; or,
// for the tpm attestor's first call, a challenge for the TPM to answer.
type JoinResult struct {
	Status        string   `json:"status" schema:"JoinStatus" doc:"What the join came to: admitted with a node, its certificate and credential; pending, with a join request waiting for the pool owner; or, for the tpm attestor's first call, a challenge."`
	NodeID        string   `json:"nodeId,omitempty" doc:"The node admitted; only when status is admitted."`
	PoolID        string   `json:"poolId" doc:"The pool the join token is for."`
	Certificate   string   `json:"certificate,omitempty" doc:"The node's certificate (PEM) for the CSR's key, issued by the control plane's CA; only when admitted."`
	CACertificate string   `json:"caCertificate,omitempty" doc:"The control plane CA's certificate (PEM), which issued the node's; only when admitted."`
	Credential    string   `json:"credential,omitempty" doc:"The node's bearer token, shown only here: it reports the node's own inventory and workflow steps, and a hosted pool's host reads and reports its instances; only when admitted."`
	JoinRequestID string   `json:"joinRequestId,omitempty" doc:"The join request that waits for the pool owner's decision; only when pending."`
	Reasons       []Reason `json:"reasons,omitempty" doc:"Why the join was deferred; only when pending."`
	// The challenge: base64 of the TPM2B_ID_OBJECT and the
	// TPM2B_ENCRYPTED_SECRET (each with its 2-byte big-endian size first)
	// that TPM2_ActivateCredential takes, and when it expires.
	ChallengeID     string     `json:"challengeId,omitempty" doc:"The challenge to answer in the second call's evidence; only when status is challenge."`
	CredentialBlob  string     `json:"credentialBlob,omitempty" doc:"Base64 of the TPM2B_ID_OBJECT (its 2-byte big-endian size first) that TPM2_ActivateCredential takes; only with a challenge."`
	EncryptedSecret string     `json:"encryptedSecret,omitempty" doc:"Base64 of the TPM2B_ENCRYPTED_SECRET (its 2-byte big-endian size first) that TPM2_ActivateCredential takes; only with a challenge."`
	ExpiresAt       *time.Time `json:"expiresAt,omitempty" doc:"When the challenge expires (5 minutes after it was made); only with a challenge."`
}

// JoinRequest is a deferred join in the approval queue.
type JoinRequest struct {
	JoinRequestID  string          `json:"joinRequestId" db:"join_request_id" doc:"The join request's id (jreq_ and a ULID)."`
	PoolID         string          `json:"poolId" db:"pool_id" doc:"The pool the machine asked to join."`
	TenantID       string          `json:"tenantId" db:"tenant_id" doc:"The tenant that owns the pool and decides the request."`
	JoinTokenID    string          `json:"joinTokenId" db:"join_token_id" doc:"The join token the machine joined with."`
	State          string          `json:"state" db:"req_state" schema:"JoinRequestState" doc:"A pending request waits for a decision (7 days), an approved one for the machine's retry (24 hours); consumed once that retry was admitted, else denied or expired."`
	Attestor       string          `json:"attestor" db:"attestor" schema:"Attestor" doc:"The attestor that deferred the join."`
	Reasons        json.RawMessage `json:"reasons" db:"-" schema:"JoinReasons" doc:"Why the join was deferred: [{code, message}]."`
	CSRFingerprint string          `json:"csrFingerprint" db:"csr_fingerprint" doc:"The lowercase hex SHA-256 of the join's CSR (its DER): a retry with the same CSR finds the request."`
	Hardware       json.RawMessage `json:"hardware" db:"-" schema:"NodeHardware" doc:"The hardware ids the machine presented."`
	EKHash         *string         `json:"ekHash" db:"ek_hash" doc:"The SHA-256 (hex) of the TPM endorsement key's DER SubjectPublicKeyInfo, for a tpm join; null for the other attestors."`
	EKProven       bool            `json:"ekProven" db:"ek_proven" doc:"The machine proved by credential activation that it holds the TPM with this endorsement key."`
	NodeID         *string         `json:"nodeId" db:"node_id" doc:"The node the approved retry admitted; null until the request is consumed."`
	DecidedBy      *string         `json:"decidedBy" db:"decided_by" doc:"The principal id of who approved or denied the request; null while undecided."`
	DecidedAt      *time.Time      `json:"decidedAt" db:"decided_at" doc:"When the request was approved or denied; null while undecided."`
	DenyReason     *string         `json:"denyReason" db:"deny_reason" doc:"Why the request was denied, when the denial said."`
	ExpiresAt      time.Time       `json:"expiresAt" db:"expires_at" doc:"When a pending request stops waiting for a decision (7 days after it was made), or an approved one for the machine's retry (24 hours after the approval)."`
	CreatedAt      time.Time       `json:"createdAt" db:"created_at" doc:"When the join was deferred."`
	UpdatedAt      time.Time       `json:"updatedAt" db:"updated_at" doc:"When the request last changed."`

	ReasonsText  string `json:"-" db:"reasons"`
	HardwareText string `json:"-" db:"hardware"`
}

func (r *JoinRequest) fix() *JoinRequest {
	r.Reasons, r.Hardware = json.RawMessage(r.ReasonsText), json.RawMessage(r.HardwareText)
	return r
}

// reqState reads pending and approved requests past their expiry as expired,
// by the clock as the statement reads them (clock_timestamp): the
// transaction's start (now()) can be before a wait for the request's lock,
// or the join token's, and a request that expired meanwhile was approved,
// denied or consumed.
const reqState = `CASE WHEN state IN ('pending', 'approved') AND expires_at <= clock_timestamp() THEN 'expired' ELSE state END AS req_state`

const reqCols = `join_request_id, pool_id, tenant_id, join_token_id, attestor, reasons::text AS reasons, csr_fingerprint,
	hardware::text AS hardware, ek_hash, ek_proven, node_id, decided_by, decided_at, deny_reason, expires_at, created_at, updated_at, ` + reqState

type (
	JoinRequestRefInput struct {
		TenantID      string `json:"tenantId"`
		JoinRequestID string `json:"joinRequestId"`
	}
	DenyInput struct {
		TenantID      string  `json:"tenantId"`
		JoinRequestID string  `json:"joinRequestId"`
		Reason        *string `json:"reason,omitempty"`
	}
	JoinRequestListInput struct {
		TenantID string  `json:"tenantId"`
		PoolID   string  `json:"poolId"`
		State    *string `json:"state,omitempty"`
		Limit    int     `json:"limit"`
		Cursor   string  `json:"cursor,omitempty"`
	}
)

// caSource loads the control plane's CA once per registry (every replica
// reads the same persisted CA).
type caSource struct {
	db   *store.DB
	mu   sync.Mutex
	ca   *pki.CA
	load func(ctx context.Context, db *store.DB) (*pki.CA, error)
}

// get returns the CA, read the first time through q, the join's own
// transaction: a join holds one connection of the pool, and asking the
// pool for a second one while holding it would wait forever once joins
// hold every connection. Only when no CA is stored yet (a server that did
// not run EnsureCA at start) is it created, through the pool.
func (c *caSource) get(ctx context.Context, q store.Q) (*pki.CA, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ca != nil {
		return c.ca, nil
	}
	ca, err := pki.Read(ctx, q)
	if err != nil {
		return nil, err
	}
	if ca == nil {
		if c.db == nil {
			return nil, fmt.Errorf("nodes: no database for the CA")
		}
		if ca, err = c.load(ctx, c.db); err != nil {
			return nil, err
		}
	}
	c.ca = ca
	return ca, nil
}

type tokenRow struct {
	JoinTokenID string     `db:"join_token_id"`
	PoolID      string     `db:"pool_id"`
	TenantID    string     `db:"tenant_id"`
	MaxUses     int        `db:"max_uses"`
	Uses        int        `db:"uses"`
	Expired     bool       `db:"expired"`
	RevokedAt   *time.Time `db:"revoked_at"`
	PoolState   string     `db:"pool_state"`
}

// badToken refuses a join token that authenticates nothing (unknown,
// revoked, expired or used up): a failed authentication of nodes.join's
// credential, which spends the client address's budget as a bad bearer
// token does (auth.Failed; the registry charges it after the rollback).
// A join whose token authenticates spends none, whatever its answer.
func badToken(msg string) error { return auth.Failed(errs.E(errs.Unauthenticated, "%s", msg)) }

// join admits a machine or defers it into a join request.
func (s *service) join(ctx context.Context, q store.Q, in *JoinInput) (*JoinResult, error) {
	csr, err := pki.ParseCSR("csr", in.CSR)
	if err != nil {
		return nil, err
	}
	hw, err := reportedHardware(in.Hardware)
	if err != nil {
		return nil, err
	}
	var tpm *tpmEvidence
	if in.Attestor == AttestorTPM {
		if tpm, err = parseTPMEvidence(in.Evidence); err != nil {
			return nil, err
		}
	}
	tok, err := lockToken(ctx, q, in.JoinToken)
	if err != nil {
		return nil, err
	}
	if tpm == nil || !tpm.answer() {
		return s.decideJoin(ctx, q, in, tok, csr, hw, tpm, nil)
	}
	// The tpm attestor's answer proves possession of the EK before
	// anything else is decided (an approval included), and spends the
	// challenge. A refusal decided after the proof (the TPM or machine
	// already joined, the token used up, a request made for another
	// machine) leaves it spent: only the join's own writes are undone. It
	// was rolled back with them, and a probe sent one answer, refused
	// CONFLICT while the TPM's node was live, again after that node was
	// removed, and was admitted, with the node's credential: anyone who
	// saw the answer could have. (A failure of the database's, not a
	// refusal, still rolls back all: the client may send the answer
	// again.)
	proven, err := prove(ctx, q, tok, csr, hw, tpm)
	if err != nil {
		return nil, err
	}
	var res *JoinResult
	err = store.Savepoint(ctx, q, func() error {
		var err error
		res, err = s.decideJoin(ctx, q, in, tok, csr, hw, tpm, proven)
		return err
	})
	if e, ok := errs.As(err); ok && e.Code != errs.Internal && e.Code != errs.Unavailable {
		return nil, registry.KeepWrites(err)
	}
	return res, err
}

// decideJoin admits the machine, defers it into a join request, answers
// with a TPM challenge, or refuses, once the token is locked and a TPM's
// answer (proven) checked.
func (s *service) decideJoin(ctx context.Context, q store.Q, in *JoinInput, tok *tokenRow, csr *pki.CSR, hw Hardware,
	tpm *tpmEvidence, proven *provenEK) (*JoinResult, error) {
	prev, err := previousRequest(ctx, q, tok, csr)
	if err != nil {
		return nil, err
	}
	if prev != nil {
		if res, err, decided := s.joinAgain(ctx, q, tok, csr, hw, in, tpm, proven, prev); decided {
			return res, err
		}
	}
	if tok.Uses >= tok.MaxUses {
		return nil, badToken("the join token has no uses left")
	}
	if tpm != nil && !tpm.answer() {
		return s.challenge(ctx, q, tok, csr, hw, tpm)
	}
	reasons, err := attest(ctx, q, tok.PoolID, hw, in.Attestor, proven)
	if err != nil {
		return nil, err
	}
	if len(reasons) == 0 {
		return s.admit(ctx, q, tok, hw, csr, in, proven, "")
	}
	return deferJoin(ctx, q, tok, csr, hw, in.Attestor, proven, reasons)
}

// reportedHardware is the machine's hardware ids as compared and stored:
// the UUID normalized, MACs in lower case and each once.
func reportedHardware(in Hardware) (Hardware, error) {
	hw := Hardware{SystemUUID: normUUID(in.SystemUUID), Serial: strings.TrimSpace(in.Serial), MACs: []string{}}
	seen := map[string]bool{}
	for i, m := range in.MACs {
		m = strings.ToLower(m)
		if seen[m] {
			return hw, errs.Invalid(fmt.Sprintf("hardware.macs[%d]", i), "MAC %s is listed twice", m)
		}
		seen[m] = true
		hw.MACs = append(hw.MACs, m)
	}
	return hw, nil
}

// lockToken finds the join token by its secret and locks its row, which
// serializes joins through one token (its use count); a token that
// admits nothing more, or whose pool takes no joins, is refused.
func lockToken(ctx context.Context, q store.Q, secret string) (*tokenRow, error) {
	// The join holds its pool's settings (authz.LockPool) before it
	// share-locks the pool's row: the token's pool first.
	var poolID string
	err := q.GetContext(ctx, &poolID, `SELECT pool_id FROM join_tokens WHERE secret_hash = $1`, auth.Hash(secret))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, badToken("unknown join token")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if err := authz.LockPool(ctx, q, poolID, "FOR SHARE"); err != nil {
		return nil, err
	}
	var tok tokenRow
	err = q.GetContext(ctx, &tok, `SELECT t.join_token_id, t.pool_id, t.tenant_id, t.max_uses, t.uses, t.revoked_at,
			t.expires_at <= clock_timestamp() AS expired, p.state AS pool_state
		FROM join_tokens t JOIN pools p ON p.pool_id = t.pool_id
		WHERE t.secret_hash = $1 FOR UPDATE OF t FOR SHARE OF p`, auth.Hash(secret))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, badToken("unknown join token")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	switch {
	case tok.RevokedAt != nil:
		return nil, badToken("the join token is revoked")
	case tok.Expired:
		return nil, badToken("the join token has expired")
	case tok.PoolState != "active":
		return nil, errs.InState(tok.PoolState, "pool %s is %s and takes no joins", tok.PoolID, tok.PoolState)
	}
	return &tok, nil
}

// previousRequest refuses a key pair a live node holds, expires the
// pool's requests for the key pair that are past their time, and returns
// the latest one, locked (nil when there is none).
func previousRequest(ctx context.Context, q store.Q, tok *tokenRow, csr *pki.CSR) (*JoinRequest, error) {
	var live struct {
		NodeID   string `db:"node_id"`
		TenantID string `db:"tenant_id"`
	}
	// By its key, whatever CSR carries it (a node that joined before
	// migration 00025 and whose key the startup could not record is found
	// by its CSR).
	err := q.GetContext(ctx, &live, `SELECT node_id, tenant_id FROM nodes
		WHERE (key_fingerprint = $1 OR csr_fingerprint = $2) AND state <> 'removed' LIMIT 1`, csr.KeyFingerprint, csr.Fingerprint)
	if err == nil {
		// A key is one live node's on the whole platform; the node is
		// named only to its own tenant's joins.
		e := errs.E(errs.Conflict, "a live node already holds this CSR's key; remove it or join with a new key")
		if live.TenantID == tok.TenantID {
			e = e.With("nodeId", live.NodeID)
		}
		return nil, e
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, store.Wrap(err)
	}
	// An earlier request for this key pair in this pool decides first.
	var expired []JoinRequest
	if err := q.SelectContext(ctx, &expired, `UPDATE join_requests SET state = 'expired', updated_at = now()
		WHERE pool_id = $1 AND csr_fingerprint = $2 AND state IN ('pending', 'approved') AND expires_at <= clock_timestamp()
		RETURNING `+reqCols, tok.PoolID, csr.Fingerprint); err != nil {
		return nil, store.Wrap(err)
	}
	for i := range expired {
		if err := requestEvent(ctx, q, events.JoinRequestExpired, expired[i].fix()); err != nil {
			return nil, err
		}
	}
	var prev JoinRequest
	err = q.GetContext(ctx, &prev, `SELECT `+reqCols+` FROM join_requests WHERE pool_id = $1 AND csr_fingerprint = $2
		ORDER BY join_request_id DESC LIMIT 1 FOR UPDATE`, tok.PoolID, csr.Fingerprint)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &prev, nil
}

// joinAgain decides a join for a key pair with an earlier request in the
// pool: decided is false when the request is spent (consumed or expired)
// and the join is attested afresh (a consumed request whose node is still
// live was refused by the node's fingerprint).
func (s *service) joinAgain(ctx context.Context, q store.Q, tok *tokenRow, csr *pki.CSR, hw Hardware, in *JoinInput,
	tpm *tpmEvidence, proven *provenEK, prev *JoinRequest) (_ *JoinResult, _ error, decided bool) {
	open := prev.State == Pending || prev.State == Approved
	if tpm != nil && !tpm.answer() && open {
		// The tpm attestor's first call: every admission, an approved one
		// included, and every answer about a pending request wait for the
		// challenge's answer (a denied request is refused below).
		res, err := s.challenge(ctx, q, tok, csr, hw, tpm)
		return res, err, true
	}
	if open {
		if err := prev.forAnother(in.Attestor, proven, hw); err != nil {
			return nil, err, true
		}
	}
	switch prev.State {
	case Approved:
		res, err := s.admit(ctx, q, tok, hw, csr, in, proven, prev.JoinRequestID)
		return res, err, true
	case Pending:
		prev.fix()
		var reasons []Reason
		_ = json.Unmarshal(prev.Reasons, &reasons)
		return &JoinResult{Status: Pending, PoolID: tok.PoolID, JoinRequestID: prev.JoinRequestID, Reasons: reasons}, nil, true
	case Denied:
		return nil, errs.E(errs.PermissionDenied, "join request %s for this CSR was denied", prev.JoinRequestID).
			With("joinRequestId", prev.JoinRequestID), true
	}
	return nil, nil, false
}

// forAnother refuses a join that is not the one an open request (and its
// approval) was made for: a request is for the attestor that deferred it,
// for the hardware ids it shows the pool's owner (the machine's UUID,
// serial and MACs, in any order) and, for tpm, for the TPM whose
// endorsement key it names, which this join proved holding by answering
// its challenge (proven). The same CSR sent through another attestor, with
// other hardware, with no TPM or another one, gets nothing of it:
// PERMISSION_DENIED naming the request (an approval admitted whatever
// hardware the retry then reported). joinAgain calls it with the request's
// row locked, in the transaction that consumes an approval.
func (r *JoinRequest) forAnother(attestor string, proven *provenEK, hw Hardware) error {
	var asked Hardware
	if err := json.Unmarshal([]byte(r.HardwareText), &asked); err != nil {
		return fmt.Errorf("nodes: join request %s: stored hardware: %w", r.JoinRequestID, err)
	}
	switch {
	case attestor != r.Attestor:
		return errs.E(errs.PermissionDenied, "join request %s for this CSR was made through the %s attestor, not %s", r.JoinRequestID, r.Attestor, attestor).
			With("joinRequestId", r.JoinRequestID)
	case r.Attestor == AttestorTPM && (proven == nil || r.EKHash == nil || *r.EKHash != proven.ekHash):
		return errs.E(errs.PermissionDenied, "join request %s for this CSR was made from a TPM with another endorsement key", r.JoinRequestID).
			With("joinRequestId", r.JoinRequestID)
	case !sameHardware(asked, hw):
		return errs.E(errs.PermissionDenied, "join request %s for this CSR was made for other hardware (systemUuid, serial or macs); join with a new key to be attested afresh", r.JoinRequestID).
			With("joinRequestId", r.JoinRequestID)
	}
	return nil
}

// sameHardware compares two machines' normalized hardware ids, the MACs
// in any order.
func sameHardware(a, b Hardware) bool {
	if a.SystemUUID != b.SystemUUID || a.Serial != b.Serial || len(a.MACs) != len(b.MACs) {
		return false
	}
	x, y := slices.Clone(a.MACs), slices.Clone(b.MACs)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// deferJoin stores a join that waits for approval as a pending join
// request, and answers with it (or with the request a concurrent join for
// the same key pair made first).
func deferJoin(ctx context.Context, q store.Q, tok *tokenRow, csr *pki.CSR, hw Hardware, attestor string, proven *provenEK, reasons []Reason) (*JoinResult, error) {
	var ekHash *string
	if proven != nil {
		ekHash = &proven.ekHash
	}
	// A machine or TPM with a live node of the tenant is CONFLICT before it
	// is deferred too: queued, its request could only be approved into
	// that CONFLICT (a probe's queue filled with such requests).
	if err := oneLiveNode(ctx, q, tok.TenantID, hw, ekHash); err != nil {
		return nil, err
	}
	// The token's row is locked (lockToken), so the bound holds under
	// concurrent joins.
	var open struct {
		N    int             `db:"n"`
		Wait sql.NullFloat64 `db:"wait"`
	}
	if err := q.GetContext(ctx, &open, `SELECT count(*) AS n, extract(epoch FROM min(expires_at) - now())::float8 AS wait
		FROM join_requests WHERE join_token_id = $1 AND state = 'pending' AND expires_at > now()`, tok.JoinTokenID); err != nil {
		return nil, store.Wrap(err)
	}
	if open.N >= MaxPendingRequests {
		// The oldest expires in up to 7 days, but the owner's decision
		// frees room at any time: a daemon waits at most pendingPoll.
		secs := min(int(pendingPoll/time.Second), max(1, int(math.Ceil(open.Wait.Float64))))
		return nil, errs.E(errs.RateLimited, "the join token has %d pending join requests, the most it may have; retry in %d s, once the pool's owner has decided one or the oldest has expired",
			open.N, secs).With("reason", "pending-requests").With("limit", MaxPendingRequests).With("retryAfterSeconds", secs)
	}
	rb, _ := json.Marshal(reasons)
	hb, _ := json.Marshal(hw)
	var id string
	var created JoinRequest
	err := q.GetContext(ctx, &created, `INSERT INTO join_requests (join_request_id, pool_id, tenant_id, join_token_id, attestor, reasons,
			csr_fingerprint, hardware, ek_hash, ek_proven, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::jsonb, $9, $10, now() + make_interval(secs => $11))
		ON CONFLICT (pool_id, csr_fingerprint) WHERE state IN ('pending', 'approved') DO NOTHING
		RETURNING `+reqCols,
		ids.New(ids.JoinRequest), tok.PoolID, tok.TenantID, tok.JoinTokenID, attestor, string(rb),
		csr.Fingerprint, string(hb), ekHash, proven != nil, int(PendingTTL/time.Second))
	if err == nil {
		id = created.JoinRequestID
		err = requestEvent(ctx, q, events.JoinRequestPending, created.fix())
	}
	if errors.Is(err, sql.ErrNoRows) {
		// A concurrent join with the same CSR deferred first: answer with its request.
		err = q.GetContext(ctx, &id, `SELECT join_request_id FROM join_requests
			WHERE pool_id = $1 AND csr_fingerprint = $2 AND state IN ('pending', 'approved')`, tok.PoolID, csr.Fingerprint)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &JoinResult{Status: Pending, PoolID: tok.PoolID, JoinRequestID: id, Reasons: reasons}, nil
}

// attest runs the attestor and returns why the join must wait for approval
// (nothing when it is admitted).
func attest(ctx context.Context, q store.Q, poolID string, hw Hardware, attestor string, proven *provenEK) ([]Reason, error) {
	reasons := []Reason{}
	ph := pki.Placeholders(hw.SystemUUID, hw.Serial)
	if len(ph) > 0 {
		reasons = append(reasons, Reason{Code: ReasonPlaceholder,
			Message: "the machine reports placeholder hardware ids (" + strings.Join(ph, ", ") + ")"})
	}
	switch attestor {
	case "discovery":
		// Placeholder ids identify no machine, so they never match.
		var uuid, serial *string
		if !pki.PlaceholderUUID(hw.SystemUUID) {
			uuid = &hw.SystemUUID
		}
		if !pki.PlaceholderSerial(hw.Serial) {
			serial = &hw.Serial
		}
		macs := []string{}
		for _, m := range hw.MACs {
			if !pki.PlaceholderMAC(m) { // one registered before the rule held matches no join
				macs = append(macs, m)
			}
		}
		var known bool
		err := q.GetContext(ctx, &known, `SELECT EXISTS (SELECT 1 FROM expected_machines WHERE pool_id = $1
			AND (system_uuid = $2 OR serial = $3 OR mac = ANY($4)))`, poolID, uuid, serial, macs)
		if err != nil {
			return nil, store.Wrap(err)
		}
		if !known {
			reasons = append(reasons, Reason{Code: ReasonUnknown, Message: "the discovery attestor does not know this machine in the pool"})
		}
	case "tpm":
		// The EK (proven held by the machine) is allowed by its hash, or by
		// an allowed CA its certificate chained to when challenged.
		var allowed bool
		err := q.GetContext(ctx, &allowed, `SELECT EXISTS (SELECT 1 FROM tpm_allowed_keys WHERE pool_id = $1
			AND ((kind = 'ek' AND ek_hash = $2) OR (kind = 'ca' AND ek_hash = ANY($3))))`, poolID, proven.ekHash, proven.caHashes)
		if err != nil {
			return nil, store.Wrap(err)
		}
		if !allowed {
			reasons = append(reasons, Reason{Code: ReasonEKNotAllowed, Message: "the machine proved by credential activation that it holds the TPM with endorsement key " +
				proven.ekHash + ", which is on no allow-list of the pool"})
		}
	}
	return reasons, nil
}

// admit creates the node, its principal and credential, and the certificate
// for the CSR's key; with a join request id, it consumes that approval.
// proven is the endorsement key a tpm join proved holding (nil for the
// other attestors).
func (s *service) admit(ctx context.Context, q store.Q, tok *tokenRow, hw Hardware, csr *pki.CSR, in *JoinInput, proven *provenEK, reqID string) (*JoinResult, error) {
	ca, err := s.ca.get(ctx, q)
	if err != nil {
		return nil, err
	}
	var ekHash *string
	if proven != nil {
		ekHash = &proven.ekHash
	}
	if err := oneLiveNode(ctx, q, tok.TenantID, hw, ekHash); err != nil {
		return nil, err
	}
	if reqID == "" {
		res, err := q.ExecContext(ctx, `UPDATE join_tokens SET uses = uses + 1 WHERE join_token_id = $1 AND uses < max_uses`, tok.JoinTokenID)
		if err != nil {
			return nil, store.Wrap(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil, badToken("the join token has no uses left")
		}
	}
	nodeID := ids.New(ids.Node)
	cert, notAfter, err := ca.Sign(csr, nodeID, CertValidity)
	if err != nil {
		return nil, err
	}
	name := nodeID
	if in.Name != nil {
		name = *in.Name
	}
	attestor := in.Attestor
	principalID := ids.New(ids.Principal)
	if _, err := q.ExecContext(ctx, `INSERT INTO principals (principal_id, kind, tenant_id, name, node_id) VALUES ($1, 'node', $2, $3, $4)`,
		principalID, tok.TenantID, nodeID, nodeID); err != nil {
		return nil, store.Wrap(err)
	}
	secret := ids.Secret("bcn")
	if _, err := q.ExecContext(ctx, `INSERT INTO tokens (token_id, principal_id, name, secret_hash) VALUES ($1, $2, 'node credential', $3)`,
		ids.New(ids.Token), principalID, auth.Hash(secret)); err != nil {
		return nil, store.Wrap(err)
	}
	var jr *string
	if reqID != "" {
		jr = &reqID
	}
	var node Node
	err = q.GetContext(ctx, &node, `INSERT INTO nodes (node_id, tenant_id, pool_id, name, attestor, system_uuid, serial, macs,
			csr_fingerprint, certificate, cert_expires_at, principal_id, join_request_id, ek_hash, key_fingerprint)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING `+nodeCols,
		nodeID, tok.TenantID, tok.PoolID, name, attestor, hw.SystemUUID, hw.Serial, hw.MACs,
		csr.Fingerprint, cert, notAfter, principalID, jr, ekHash, csr.KeyFingerprint)
	if store.IsUnique(err, "nodes_csr_fingerprint_key") || store.IsUnique(err, "nodes_key_fingerprint_key") {
		return nil, errs.E(errs.Conflict, "a node with this CSR's key already joined")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if _, err := nodeEvent(ctx, q, events.NodeJoined, node.fix()); err != nil {
		return nil, err
	}
	if reqID != "" {
		// The request's row is locked (previousRequest) and approved.
		res, err := q.ExecContext(ctx, `UPDATE join_requests SET state = 'consumed', node_id = $2, updated_at = now()
			WHERE join_request_id = $1 AND state = 'approved'`, reqID, nodeID)
		if err != nil {
			return nil, store.Wrap(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil, fmt.Errorf("nodes: join request %s was not approved when consumed", reqID)
		}
	}
	return &JoinResult{Status: "admitted", NodeID: nodeID, PoolID: tok.PoolID, Certificate: cert,
		CACertificate: ca.CertificatePEM(), Credential: secret, JoinRequestID: reqID}, nil
}

// --- the approval queue ----------------------------------------------------

func reqNotFound(id string) error { return errs.E(errs.NotFound, "join request %s not found", id) }

// GetJoinRequest returns one request of a pool the tenant owns, read with
// the graph's predicate (requestVisible) bound to that tenant.
func GetJoinRequest(ctx context.Context, q store.Q, in *JoinRequestRefInput) (*JoinRequest, error) {
	var r JoinRequest
	err := q.GetContext(ctx, &r, `SELECT `+reqCols+` FROM join_requests r WHERE join_request_id = $1 AND `+requestVisible("ARRAY[$2]"),
		in.JoinRequestID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, reqNotFound(in.JoinRequestID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return r.fix(), nil
}

// ListJoinRequests pages a pool's requests by id, optionally in one state.
func ListJoinRequests(ctx context.Context, q store.Q, in *JoinRequestListInput) (*page.Page[JoinRequest], error) {
	var after string
	if _, err := RequestCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, readPool); err != nil {
		return nil, err
	}
	rows := []JoinRequest{}
	err := q.SelectContext(ctx, &rows, `SELECT * FROM (SELECT `+reqCols+` FROM join_requests r
			WHERE pool_id = $1 AND join_request_id > $2 AND `+requestVisible("ARRAY[$5]")+`) r
		WHERE $3::text IS NULL OR r.req_state = $3 ORDER BY join_request_id LIMIT $4`, in.PoolID, after, in.State, in.Limit+1, in.TenantID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		rows[i].fix()
	}
	items, cur := page.Trim(rows, in.Limit, func(r JoinRequest) string { return RequestCursors.Encode(r.JoinRequestID) })
	return &page.Page[JoinRequest]{Items: items, Cursor: cur}, nil
}

// decide moves a request from one of the from states to the new state.
func decide(ctx context.Context, q store.Q, in *JoinRequestRefInput, reason *string, to string, from ...string) (*JoinRequest, error) {
	var r JoinRequest
	if to == Approved {
		// An approval lets a node into the pool: refused, as a join is,
		// when the pool is no longer active (an approval in an archived
		// pool answered 200, and every join it admitted was then
		// INVALID_STATE). The pool is held first, as a join holds it.
		var poolID string
		err := q.GetContext(ctx, &poolID, `SELECT pool_id FROM join_requests WHERE join_request_id = $1 AND tenant_id = $2`, in.JoinRequestID, in.TenantID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, reqNotFound(in.JoinRequestID)
		}
		if err != nil {
			return nil, store.Wrap(err)
		}
		if _, err := ownedPool(ctx, q, in.TenantID, poolID, addToPool); err != nil {
			return nil, err
		}
	}
	err := q.GetContext(ctx, &r, `SELECT `+reqCols+` FROM join_requests WHERE join_request_id = $1 AND tenant_id = $2 FOR UPDATE`,
		in.JoinRequestID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, reqNotFound(in.JoinRequestID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	ok := false
	for _, f := range from {
		ok = ok || r.State == f
	}
	if !ok {
		return nil, errs.E(errs.InvalidState, "join request %s is %s", in.JoinRequestID, r.State).With("state", r.State)
	}
	ttl := 0
	if to == Approved {
		ttl = int(ApprovedTTL / time.Second)
	}
	by := ""
	if p := reqctx.PrincipalFrom(ctx); p != nil {
		by = p.ID
	}
	err = q.GetContext(ctx, &r, `UPDATE join_requests SET state = $2, decided_by = $3, decided_at = now(), updated_at = now(),
			expires_at = CASE WHEN $4::int > 0 THEN now() + make_interval(secs => $4::int) ELSE expires_at END,
			deny_reason = $5
		WHERE join_request_id = $1 RETURNING `+reqCols, in.JoinRequestID, to, by, ttl, reason)
	if err != nil {
		return nil, store.Wrap(err)
	}
	typ := events.JoinRequestApproved
	if to == Denied {
		typ = events.JoinRequestDenied
	}
	return r.fix(), requestEvent(ctx, q, typ, &r)
}

// requestEvent writes a join request's event in the change's transaction.
func requestEvent(ctx context.Context, q store.Q, typ string, r *JoinRequest) error {
	return events.Write(ctx, q, events.Record{TenantID: r.TenantID, Type: typ, ResourceID: r.JoinRequestID, PoolID: r.PoolID, Data: r})
}

// ExpireJoinRequests moves the requests whose time ran out to expired and
// writes their joinRequest.expired events (the maintenance lease's holder
// runs it; reads already show them expired). It returns how many.
func ExpireJoinRequests(ctx context.Context, db *store.DB) (int, error) {
	var n int
	err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		var expired []JoinRequest
		if err := tx.SelectContext(ctx, &expired, `UPDATE join_requests SET state = 'expired', updated_at = now()
			WHERE join_request_id IN (SELECT join_request_id FROM join_requests
				WHERE state IN ('pending', 'approved') AND expires_at <= now() ORDER BY join_request_id LIMIT 500 FOR UPDATE SKIP LOCKED)
			RETURNING `+reqCols); err != nil {
			return store.Wrap(err)
		}
		for i := range expired {
			if err := requestEvent(ctx, tx, events.JoinRequestExpired, expired[i].fix()); err != nil {
				return err
			}
		}
		n = len(expired)
		return nil
	})
	return n, err
}

// ApproveJoinRequest lets the machine's next join with the same CSR in.
func ApproveJoinRequest(ctx context.Context, q store.Q, in *JoinRequestRefInput) (*JoinRequest, error) {
	return decide(ctx, q, in, nil, Approved, Pending)
}

// DenyJoinRequest refuses a pending or approved (not yet consumed) request.
// The reason, if given, is kept on the request and in the audit row.
func DenyJoinRequest(ctx context.Context, q store.Q, in *DenyInput) (*JoinRequest, error) {
	return decide(ctx, q, &JoinRequestRefInput{TenantID: in.TenantID, JoinRequestID: in.JoinRequestID}, in.Reason, Denied, Pending, Approved)
}

// oneLiveNode refuses a second live node of one machine in a tenant: a live
// node with the same system UUID (placeholder UUIDs identify no machine)
// or, for a tpm join, the same endorsement key, is CONFLICT naming it. The
// machine's ids are locked first (transaction advisory locks, the UUID's
// before the key's, so two joins never wait on each other in a cycle),
// which makes the check and the node's insert one decision: the same
// machine joined at once through several tokens, each call with a key of
// its own, is admitted once. The locks are the machine's, not the
// tenant's: other machines' joins do not wait.
func oneLiveNode(ctx context.Context, q store.Q, tenantID string, hw Hardware, ekHash *string) error {
	uuid := !pki.PlaceholderUUID(hw.SystemUUID)
	var locks []string
	if uuid {
		locks = append(locks, "uuid:"+hw.SystemUUID)
	}
	if ekHash != nil {
		locks = append(locks, "ek:"+*ekHash)
	}
	// Statements of their own, before the check: a check in the lock's
	// statement would read with the snapshot taken before the wait, and
	// miss the node the lock's holder committed.
	for _, id := range locks {
		if _, err := q.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "compute-node-machine:"+tenantID+":"+id); err != nil {
			return store.Wrap(err)
		}
	}
	var live struct {
		NodeID   string `db:"node_id"`
		SameUUID bool   `db:"same_uuid"`
	}
	err := q.GetContext(ctx, &live, `SELECT node_id, $3 AND system_uuid = $2 AS same_uuid FROM nodes
		WHERE state <> 'removed' AND tenant_id = $1 AND (($3 AND system_uuid = $2) OR ek_hash = $4)
		ORDER BY node_id LIMIT 1`, tenantID, hw.SystemUUID, uuid, ekHash)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return store.Wrap(err)
	case live.SameUUID:
		return errs.E(errs.Conflict, "this machine already joined as node %s", live.NodeID).With("nodeId", live.NodeID)
	default:
		return errs.E(errs.Conflict, "this TPM already joined as node %s", live.NodeID).With("nodeId", live.NodeID)
	}
}
