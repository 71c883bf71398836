package nodes_test

import (
	"encoding/base64"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
	"github.com/bettercompute/computed/internal/testkit/held"
	"github.com/bettercompute/computed/internal/testkit/tpmsim"
)

// The tpm attestor's rules, with the reference TPM as the machine: the
// first call is a challenge that spends no use of the token; a wrong
// secret is refused and spends the challenge, so a replay (or the right
// secret after it) is refused too; a TPM that proved possession of an EK
// on no allow-list is deferred with its EK proven; an allowed EK is
// admitted.
func TestTPMJoinRules(t *testing.T) {
	e := newEnv(t)
	x := tpmsim.Open(t, 97)
	ek, ak := x.EK("ecc"), x.AK(tpmsim.AKTemplateECC)
	tok := e.token(5)
	m := testkit.NewMachine(t)
	macs := []string{m.MAC, "02:00:00:00:00:aa"}
	call := func(evidence map[string]any) (*nodes.JoinResult, error) {
		b := m.JoinBody(tok)
		b["attestor"], b["evidence"] = nodes.AttestorTPM, evidence
		b["hardware"].(map[string]any)["macs"] = macs
		return fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", b)
	}
	keys := map[string]any{"ekPublicKey": ek.PEM(), "akPublic": ak.PublicB64()}
	challenge := func() (*nodes.JoinResult, string) {
		t.Helper()
		ch := fixture.Must(call(keys))
		if ch.Status != nodes.StatusChallenge || ch.ChallengeID == "" || ch.NodeID != "" {
			t.Fatalf("first call: %+v", ch)
		}
		secret, err := x.Activate(ak, ek, ch.CredentialBlob, ch.EncryptedSecret)
		if err != nil {
			t.Fatalf("activation: %v", err)
		}
		return ch, base64.StdEncoding.EncodeToString(secret)
	}
	refused := func(err error, reason string) {
		t.Helper()
		if got := fixture.Code(t, err, errs.Unauthenticated, ""); got.Details["reason"] != reason {
			t.Fatalf("want refused for %s, got %v", reason, got.Details)
		}
	}

	ch, secret := challenge()
	wrong := base64.StdEncoding.EncodeToString(make([]byte, pki.SecretSize))
	_, err := call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": wrong})
	refused(err, nodes.ChallengeWrong)
	_, err = call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret})
	refused(err, nodes.ChallengeUsed)
	// A secret of another length is a wrong secret too, and spends the
	// challenge (it was INVALID_INPUT, and the challenge stayed open to
	// more guesses).
	ch, secret = challenge()
	_, err = call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": base64.StdEncoding.EncodeToString(make([]byte, 16))})
	refused(err, nodes.ChallengeWrong)
	_, err = call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret})
	refused(err, nodes.ChallengeUsed)

	// The answer lists the MACs in another order than the first call
	// did: the same hardware, as join requests compare it (it was
	// challenge-mismatch, and spent the challenge).
	ch, secret = challenge()
	macs = []string{macs[1], macs[0]}
	r := fixture.Must(call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret}))
	if r.Status != nodes.Pending || len(r.Reasons) != 1 || r.Reasons[0].Code != nodes.ReasonEKNotAllowed {
		t.Fatalf("an EK on no allow-list: %+v", r)
	}
	req := fixture.Must(nodes.GetJoinRequest(e.Ctx, e.DB, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: r.JoinRequestID}))
	if !req.EKProven || req.EKHash == nil {
		t.Fatalf("the request: %+v", req)
	}
	_, err = call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret})
	refused(err, nodes.ChallengeUsed)

	// Allowed by its key, the same TPM with a new key pair is admitted.
	fixture.Must(nodes.AllowKey(e.Ctx, e.DB, &nodes.KeyAllowInput{TenantID: "acme", PoolID: e.pool, EKHash: req.EKHash}))
	m = testkit.NewMachine(t)
	ch, secret = challenge()
	if r = fixture.Must(call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret})); r.Status != "admitted" {
		t.Fatalf("an allowed EK: %+v", r)
	}
	var uses int
	if err := e.DB.Get(&uses, `SELECT uses FROM join_tokens WHERE secret_hash = $1`, auth.Hash(tok)); err != nil || uses != 1 {
		t.Fatalf("challenges spent uses: %d uses, %v", uses, err)
	}
}

// Answers to one challenge queued behind one another (on the join token's
// lock) each find it as the one before left it: one wrong answer spends
// it, and the next is refused as spent, not weighed as a guess. (The spend
// came after the refused join's rollback, outside the token's lock: a
// probe had up to 8 of 24 wrong answers refused as wrong-secret for one
// challenge, and one of them admitted after two wrong ones.)
func TestQueuedAnswersFindTheChallengeSpent(t *testing.T) {
	e := newEnv(t)
	x := tpmsim.Open(t, 83)
	ek, ak := x.EK("ecc"), x.AK(tpmsim.AKTemplateECC)
	tok := e.token(5)
	m := testkit.NewMachine(t)
	call := func(evidence map[string]any) (*nodes.JoinResult, error) {
		b := m.JoinBody(tok)
		b["attestor"], b["evidence"] = nodes.AttestorTPM, evidence
		return fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", b)
	}
	for round := 0; round < 3; round++ {
		ch := fixture.Must(call(map[string]any{"ekPublicKey": ek.PEM(), "akPublic": ak.PublicB64()}))
		wrong := base64.StdEncoding.EncodeToString(make([]byte, pki.SecretSize))
		const answers = 4
		results := make([]error, answers)
		err := held.WhileWaiting(t, e.DB, answers, func(tx *sqlx.Tx) error {
			_, err := tx.Exec(`SELECT 1 FROM join_tokens WHERE secret_hash = $1 FOR UPDATE`, auth.Hash(tok))
			return err
		}, func() error {
			var wg sync.WaitGroup
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, results[i] = call(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": wrong})
				}()
			}
			wg.Wait()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		why := map[any]int{}
		for _, err := range results {
			e, ok := errs.As(err)
			if !ok || e.Code != errs.Unauthenticated {
				t.Fatalf("round %d: %v", round, err)
			}
			why[e.Details["reason"]]++
		}
		if why[nodes.ChallengeWrong] != 1 || why[nodes.ChallengeUsed] != answers-1 {
			t.Fatalf("round %d: %d answers to one challenge refused as %v", round, answers, why)
		}
	}
}
