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
	tok := e.token(5)
	j := newTPMMachine(t, e, 97, tok)
	j.macs = []string{j.m.MAC, "02:00:00:00:00:aa"}
	call, challenge := j.join, func() (*nodes.JoinResult, string) { t.Helper(); return j.challenge(t) }
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
	j.macs = []string{j.macs[1], j.macs[0]}
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
	j.m = testkit.NewMachine(t)
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
	tok := e.token(5)
	j := newTPMMachine(t, e, 83, tok)
	for round := 0; round < 3; round++ {
		ch := fixture.Must(j.join(j.keys()))
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
					_, results[i] = j.join(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": wrong})
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

// tpmMachine is a machine with the reference TPM (an ECC endorsement and
// attestation key) joining e's pool through tok with the tpm attestor;
// macs, when set, are the MACs it reports.
type tpmMachine struct {
	e      *env
	tok    string
	x      *tpmsim.TPM
	ek, ak *tpmsim.Key
	m      testkit.Machine
	macs   []string
}

func newTPMMachine(t *testing.T, e *env, seed int64, tok string) *tpmMachine {
	x := tpmsim.Open(t, seed)
	return &tpmMachine{e: e, tok: tok, x: x, ek: x.EK("ecc"), ak: x.AK(tpmsim.AKTemplateECC), m: testkit.NewMachine(t)}
}

// join calls nodes.join with evidence.
func (j *tpmMachine) join(evidence map[string]any) (*nodes.JoinResult, error) {
	b := j.m.JoinBody(j.tok)
	b["attestor"], b["evidence"] = nodes.AttestorTPM, evidence
	if j.macs != nil {
		b["hardware"].(map[string]any)["macs"] = j.macs
	}
	return fixture.Call[nodes.JoinResult](j.e.F, nil, "nodes.join", b)
}

// keys is the first call's evidence.
func (j *tpmMachine) keys() map[string]any {
	return map[string]any{"ekPublicKey": j.ek.PEM(), "akPublic": j.ak.PublicB64()}
}

// challenge makes the first call, checks the challenge's shape and
// activates its credential in the TPM: the challenge and the secret, base64.
func (j *tpmMachine) challenge(t *testing.T) (*nodes.JoinResult, string) {
	t.Helper()
	ch := fixture.Must(j.join(j.keys()))
	if ch.Status != nodes.StatusChallenge || ch.ChallengeID == "" || ch.NodeID != "" {
		t.Fatalf("first call: %+v", ch)
	}
	secret, err := j.x.Activate(j.ak, j.ek, ch.CredentialBlob, ch.EncryptedSecret)
	if err != nil {
		t.Fatalf("activation: %v", err)
	}
	return ch, base64.StdEncoding.EncodeToString(secret)
}

// A refusal decided after the proof leaves the challenge spent: the same
// answer sent again is challenge-used, whatever changed meanwhile. (The
// spend was rolled back with the refused join: a probe sent one answer,
// refused CONFLICT while the TPM's node was live, again after that node
// was removed, and was admitted with the node's credential; and an answer
// refused for a used-up token could be sent again and again.)
func TestARefusedAnswerSpendsTheChallenge(t *testing.T) {
	e := newEnv(t)
	spent := func(err error) {
		t.Helper()
		if got := fixture.Code(t, err, errs.Unauthenticated, ""); got.Details["reason"] != nodes.ChallengeUsed {
			t.Fatalf("the answer again: %v", got.Details)
		}
	}
	// The TPM already joined: CONFLICT, then spent, also once its node is gone.
	j := newTPMMachine(t, e, 61, e.token(5))
	ch, secret := j.challenge(t)
	r := fixture.Must(j.join(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret})) // deferred, its EK proven
	req := fixture.Must(nodes.GetJoinRequest(e.Ctx, e.DB, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: r.JoinRequestID}))
	fixture.Must(nodes.AllowKey(e.Ctx, e.DB, &nodes.KeyAllowInput{TenantID: "acme", PoolID: e.pool, EKHash: req.EKHash}))
	j.m = testkit.NewMachine(t)
	ch, secret = j.challenge(t)
	node := fixture.Must(j.join(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret}))
	if node.Status != "admitted" {
		t.Fatalf("an allowed EK: %+v", node)
	}
	j.m = testkit.NewMachine(t)
	ch, secret = j.challenge(t)
	answer := map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret}
	_, err := j.join(answer)
	fixture.Code(t, err, errs.Conflict, "")
	_, err = j.join(answer)
	spent(err)
	fixture.Must(nodes.RemoveNode(e.Ctx, e.DB, &nodes.NodeChangeInput{TenantID: "acme", NodeID: node.NodeID}))
	_, err = j.join(answer)
	spent(err)

	// The token used up after the challenge: refused, then spent.
	j.tok, j.m = e.token(1), testkit.NewMachine(t) // one simulated TPM at a time
	ch, secret = j.challenge(t)
	fixture.Must(e.join(testkit.NewMachine(t), j.tok))
	answer = map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret}
	_, err = j.join(answer)
	if got := fixture.Code(t, err, errs.Unauthenticated, ""); got.Details["reason"] != nil {
		t.Fatalf("a used-up token: %v", got.Details)
	}
	_, err = j.join(answer)
	spent(err)
	var nodesOfTheAnswers int
	if err := e.DB.Get(&nodesOfTheAnswers, `SELECT count(*) FROM nodes WHERE ek_hash IS NOT NULL AND state <> 'removed'`); err != nil || nodesOfTheAnswers != 0 {
		t.Fatalf("%d live nodes of TPMs (%v)", nodesOfTheAnswers, err)
	}
}
