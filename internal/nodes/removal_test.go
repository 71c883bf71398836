package nodes_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
	"github.com/bettercompute/computed/internal/testkit/held"
)

// A join decides on the pool's expected machines and allowed keys as they
// are when it commits: a machines.forget or tpmKeys.disallow still open
// when the join reads holds the join until it commits, and the join is
// then deferred. (A join that read the entry while its removal was
// committing was admitted after it: a probe's races, 3 rounds of 8 and 1
// of 12.)
func TestJoinsWaitForTheRemovalOfWhatTheyDecideOn(t *testing.T) {
	e := newEnv(t)
	tok := e.token(5)

	t.Run("machines.forget", func(t *testing.T) {
		m := testkit.NewMachine(t)
		reg := fixture.Must(fixture.Call[nodes.ExpectedMachine](e.F, e.acme.Admin, "machines.register",
			map[string]any{"tenantId": "acme", "poolId": e.pool, "mac": m.MAC}))
		body := m.JoinBody(tok)
		body["attestor"] = nodes.AttestorDiscovery
		var r *nodes.JoinResult
		err := held.While(t, e.DB, func(tx *sqlx.Tx) error {
			_, err := nodes.ForgetMachine(e.Ctx, tx, &nodes.MachineRefInput{TenantID: "acme", MachineID: reg.MachineID})
			return err
		}, func() (err error) {
			r, err = fixture.Call[nodes.JoinResult](e.F, nil, "nodes.join", body)
			return err
		})
		if err != nil || r.Status != nodes.Pending || r.Reasons[0].Code != nodes.ReasonUnknown {
			t.Fatalf("a join racing the machine's forget: %+v, %v", r, err)
		}
	})

	t.Run("tpmKeys.disallow", func(t *testing.T) {
		j := newTPMMachine(t, e, 61, tok)
		hash, err := pki.EKHash("ek", j.ek.PEM())
		if err != nil {
			t.Fatal(err)
		}
		fixture.Must(fixture.Call[nodes.AllowedKey](e.F, e.acme.Admin, "tpmKeys.allow",
			map[string]any{"tenantId": "acme", "poolId": e.pool, "ekPublicKey": j.ek.PEM()}))
		ch, secret := j.challenge(t)
		var r *nodes.JoinResult
		err = held.While(t, e.DB, func(tx *sqlx.Tx) error {
			_, err := nodes.DisallowKey(e.Ctx, tx, &nodes.KeyRefInput{TenantID: "acme", PoolID: e.pool, EKHash: hash})
			return err
		}, func() (err error) {
			r, err = j.join(map[string]any{"challengeId": ch.ChallengeID, "activatedSecret": secret})
			return err
		})
		if err != nil || r.Status != nodes.Pending || r.Reasons[0].Code != nodes.ReasonEKNotAllowed {
			t.Fatalf("a join racing its key's disallow: %+v, %v", r, err)
		}
	})
}

// An approval whose transaction began before its request expired, and that
// decides after, finds it expired: expiry is judged by the clock when the
// request is read under its lock, not by the transaction's start (which a
// wait for the request's lock, or for the join token's, puts before it).
func TestApprovalAfterTheExpiryIsRefused(t *testing.T) {
	e := newEnv(t)
	r := fixture.Must(e.join(placeholder(t), e.token(1)))
	if r.Status != nodes.Pending {
		t.Fatalf("placeholder join: %+v", r)
	}
	if _, err := e.DB.Exec(`UPDATE join_requests SET expires_at = clock_timestamp() + interval '200 milliseconds' WHERE join_request_id = $1`, r.JoinRequestID); err != nil {
		t.Fatal(err)
	}
	tx, err := e.DB.BeginTxx(e.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()                            //nolint:errcheck // only read
	if _, err := tx.Exec(`SELECT 1`); err != nil { // the approval's transaction has begun
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_, err = nodes.ApproveJoinRequest(e.Ctx, tx, &nodes.JoinRequestRefInput{TenantID: "acme", JoinRequestID: r.JoinRequestID})
	if got, ok := errs.As(err); !ok || got.Code != errs.InvalidState {
		t.Fatalf("an approval decided after its request expired: %v", err)
	}
}
