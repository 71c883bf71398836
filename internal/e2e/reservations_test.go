package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

var rsvIDRe = regexp.MustCompile(`^rsv_[0-9a-hjkmnp-tv-z]{26,52}$`)

func window(from, to time.Duration) (string, string) {
	now := time.Now().UTC()
	return now.Add(from).Format(time.RFC3339), now.Add(to).Format(time.RFC3339)
}

func rsvIn(tenantID, poolID string, gpus int, from, to time.Duration) map[string]any {
	s, e := window(from, to)
	return map[string]any{"tenantId": tenantID, "poolId": poolID, "size": map[string]any{"gpus": gpus, "vcpus": 0, "memoryGiB": 0},
		"startsAt": s, "endsAt": e}
}

// TestReservations: quota, capacity, placement honouring other tenants'
// reservations, and the methods' refusals.
func TestReservations(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	gamma := newTenant(t, e, "gamma")
	// A provider pool with a capacity of 8 GPUs, offered to beta and gamma.
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"capacity": map[string]any{"gpus": 8}})
	for _, to := range []string{"beta", "gamma"} {
		must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": to,
			"quota": map[string]any{"gpus": 6, "instances": 10}}))
	}
	b := beta.Member.Token
	r := must(t, e.Call(b, "reservations/create", rsvIn("beta", pool, 4, -time.Minute, time.Hour)))
	rid := r.Str("reservationId")
	if !rsvIDRe.MatchString(rid) || r.Str("state") != "active" || obj(t, r.Body, "size")["gpus"] != float64(4) || r.Body["rowVersion"] != float64(1) {
		t.Fatalf("reservations.create: %s", r.Raw)
	}
	g := must(t, e.Call(beta.Viewer.Token, "reservations/get", map[string]any{"tenantId": "beta", "reservationId": rid}))
	if g.Str("reservationId") != rid || g.Str("poolId") != pool || g.Str("state") != "active" || obj(t, g.Body, "size")["gpus"] != float64(4) {
		t.Fatalf("reservations.get: %s", g.Raw)
	}
	// Beta's quota: 4 reserved now, 3 more at once is over 6.
	q := e.Call(b, "reservations/create", rsvIn("beta", pool, 3, 30*time.Minute, 2*time.Hour))
	expect(t, q, "INVALID_STATE", anyPath)
	if reason(t, q) != "quota" {
		t.Fatalf("reservation over quota: %s", q.Raw)
	}
	// After beta's window it fits.
	later := must(t, e.Call(b, "reservations/create", rsvIn("beta", pool, 6, 2*time.Hour, 3*time.Hour))).Str("reservationId")
	// Capacity: beta holds 4; gamma may reserve 4 but not 5.
	c := e.Call(gamma.Member.Token, "reservations/create", rsvIn("gamma", pool, 5, 0, time.Hour))
	expect(t, c, "INVALID_STATE", anyPath)
	if reason(t, c) != "capacity" {
		t.Fatalf("reservation over capacity: %s", c.Raw)
	}
	// Placement honours beta's reservations, the one to come too, since an
	// instance has no end: beta will hold 6 GPUs in the third hour, so
	// gamma gets 2 GPUs of instances and the rest wait (it got 4, and when
	// the window opened the pool held 10 of its 8); beta's own instances
	// use its reservation.
	var gids []string
	for k := 0; k < 5; k++ {
		gids = append(gids, must(t, e.Call(gamma.Member.Token, "instances/create", instanceIn("gamma", pool, fmt.Sprintf("g%d", k), 1))).Str("instanceId"))
	}
	bid := must(t, e.Call(b, "instances/create", instanceIn("beta", pool, "b", 4))).Str("instanceId")
	waitState(t, e, b, "beta", bid, "running", 10*time.Second)
	var waiting []string // gamma's three that wait (the reconciler places in no set order)
	wait.Eventually(t, 10*time.Second, func() error {
		run := 0
		waiting = waiting[:0]
		for _, id := range gids {
			g := must(t, e.Call(gamma.Viewer.Token, "instances/get", map[string]any{"tenantId": "gamma", "instanceId": id}))
			switch g.Str("state") {
			case "running":
				run++
			case "pending":
				if g.Str("stateReason") != "" {
					waiting = append(waiting, id)
				}
			}
		}
		if run == 2 && len(waiting) == 3 {
			return nil
		}
		return fmt.Errorf("gamma: %d running, %d pending", run, len(waiting))
	})
	// Cancel beta's reservation and delete its instance: the reservation
	// to come still holds 6, and gamma's three still wait; once it is
	// canceled too, they run.
	cr := must(t, e.Call(b, "reservations/cancel", map[string]any{"tenantId": "beta", "reservationId": rid, "expectedVersion": 1}))
	if cr.Str("state") != "canceled" || cr.Body["rowVersion"] != float64(2) {
		t.Fatalf("cancel: %s", cr.Raw)
	}
	must(t, e.Call(b, "instances/delete", map[string]any{"tenantId": "beta", "instanceId": bid}))
	waitState(t, e, b, "beta", bid, "deleted", 15*time.Second)
	time.Sleep(time.Second) // the reconciler's passes over gamma's pending three
	for _, id := range waiting {
		if g := must(t, e.Call(gamma.Viewer.Token, "instances/get", map[string]any{"tenantId": "gamma", "instanceId": id})); g.Str("state") != "pending" {
			t.Fatalf("gamma's instance placed in the room beta reserved to come: %s", g.Raw)
		}
	}
	must(t, e.Call(b, "reservations/cancel", map[string]any{"tenantId": "beta", "reservationId": later}))
	for _, id := range gids {
		waitState(t, e, gamma.Viewer.Token, "gamma", id, "running", 15*time.Second)
	}

	// Refusals.
	expect(t, e.Call(b, "reservations/cancel", map[string]any{"tenantId": "beta", "reservationId": rid}), "INVALID_STATE", anyPath)
	expect(t, e.Call(gamma.Member.Token, "reservations/get", map[string]any{"tenantId": "gamma", "reservationId": rid}), "NOT_FOUND", "reservationId")
	expect(t, e.Call(beta.Viewer.Token, "reservations/create", rsvIn("beta", pool, 1, 0, time.Hour)), "PERMISSION_DENIED", anyPath)
	hidden := vpsPool(t, e, gamma.Admin.Token, "gamma", "own", nil)
	expect(t, e.Call(b, "reservations/create", rsvIn("beta", hidden, 1, 0, time.Hour)), "NOT_FOUND", "poolId")
	expect(t, e.Call(b, "reservations/create", rsvIn("beta", pool, 1, time.Hour, 0)), "INVALID_INPUT", "endsAt")
	expect(t, e.Call(b, "reservations/create", rsvIn("beta", pool, 1, -2*time.Hour, -time.Hour)), "INVALID_INPUT", "endsAt")
	expect(t, e.Call(b, "reservations/create", rsvIn("beta", pool, 0, 0, time.Hour)), "INVALID_INPUT", "size")
	bad := rsvIn("beta", pool, 1, 0, time.Hour)
	bad["startsAt"] = "tomorrow"
	expect(t, e.Call(b, "reservations/create", bad), "INVALID_INPUT", "startsAt")
	// Two ends a nanosecond apart are one instant to the database (it keeps
	// microseconds): the window is empty, said of endsAt, not a broken
	// constraint without a path.
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	ns := rsvIn("beta", pool, 1, 0, time.Hour)
	ns["startsAt"], ns["endsAt"] = start.Format(time.RFC3339), start.Add(time.Nanosecond).Format(time.RFC3339Nano)
	if r := e.Call(b, "reservations/create", ns); r.Code() != "INVALID_INPUT" || r.Path() != "endsAt" || r.Message() != "endsAt must be after startsAt" {
		t.Fatalf("a window of a nanosecond: %s", r.Raw)
	}
	bare := newPool(t, e, acme.Admin.Token, "acme", "bm")["poolId"].(string)
	expect(t, e.Call(acme.Member.Token, "reservations/create", rsvIn("acme", bare, 1, 0, time.Hour)), "INVALID_STATE", "poolId")
	l := must(t, e.Call(beta.Viewer.Token, "reservations/list", map[string]any{"tenantId": "beta"}))
	if len(items(t, l)) != 2 {
		t.Fatalf("reservations.list: %s", l.Raw)
	}
	l = must(t, e.Call(beta.Viewer.Token, "reservations/list", map[string]any{"tenantId": "beta", "state": "canceled"}))
	if len(items(t, l)) != 2 {
		t.Fatalf("reservations.list canceled: %s", l.Raw)
	}
	must(t, e.Call(b, "reservations/create", rsvIn("beta", pool, 1, 2*time.Hour, 3*time.Hour)))
	l = must(t, e.Call(beta.Viewer.Token, "reservations/list", map[string]any{"tenantId": "beta", "state": "scheduled"}))
	if len(items(t, l)) != 1 {
		t.Fatalf("reservations.list scheduled: %s", l.Raw)
	}
	expect(t, e.Call(beta.Viewer.Token, "reservations/list", map[string]any{"tenantId": "beta", "state": "nope"}), "INVALID_INPUT", "state")
}

// TestConcurrentCreatesRespectQuotaAndCapacity: many goroutines create at
// once; the offer's quota admits exactly its instances and GPUs, and a
// bounded provider pool runs exactly its capacity, the rest pending.
func TestConcurrentCreatesRespectQuotaAndCapacity(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"capacity": map[string]any{"gpus": 10}})
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "beta",
		"quota": map[string]any{"gpus": 7, "instances": 5}}))
	const n = 24
	codes := make([]int, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			<-start
			tok, tenant := beta.Member.Token, "beta"
			if k%2 == 1 {
				tok, tenant = acme.Member.Token, "acme"
			}
			r := e.Call(tok, "instances/create", instanceIn(tenant, pool, fmt.Sprintf("c%d", k), 1+k%3/2))
			codes[k] = r.Status
			if r.Status == 200 {
				ids[k] = r.Str("instanceId")
			} else if r.Status != 422 {
				t.Errorf("create %d: %d %s", k, r.Status, r.Raw)
			}
		}(k)
	}
	close(start)
	wg.Wait()
	var betaN, betaGPUs int
	if err := e.DB.QueryRow(`SELECT count(*), COALESCE(sum(gpus), 0) FROM instances WHERE tenant_id = 'beta'`).Scan(&betaN, &betaGPUs); err != nil {
		t.Fatal(err)
	}
	if betaN > 5 || betaGPUs > 7 || betaN < 4 {
		t.Fatalf("beta has %d instances with %d GPUs under a quota of 5 and 7", betaN, betaGPUs)
	}
	// Capacity: exactly 10 GPUs' worth run; the rest wait.
	wait.Eventually(t, 20*time.Second, func() error {
		var runGPUs, pending int
		if err := e.DB.QueryRow(`SELECT COALESCE(sum(gpus) FILTER (WHERE state = 'running'), 0),
			count(*) FILTER (WHERE state = 'pending' AND state_reason IS NOT NULL) FROM instances`).Scan(&runGPUs, &pending); err != nil {
			t.Fatal(err)
		}
		var total, free int
		_ = e.DB.QueryRow(`SELECT COALESCE(sum(gpus), 0) FROM instances`).Scan(&total)
		free = 10 - runGPUs
		if runGPUs > 10 {
			t.Fatalf("%d GPUs running in a pool of 10", runGPUs)
		}
		// Every pending instance needs more than what is free.
		var fits int
		_ = e.DB.QueryRow(`SELECT count(*) FROM instances WHERE state = 'pending' AND gpus <= $1`, free).Scan(&fits)
		if pending > 0 && fits == 0 && runGPUs+pending > 0 {
			var notSettled int
			_ = e.DB.QueryRow(`SELECT count(*) FROM instances WHERE state NOT IN ('running', 'pending')`).Scan(&notSettled)
			if notSettled == 0 {
				return nil
			}
		}
		return fmt.Errorf("not settled: %d GPUs running, %d pending, %d free, %d fit", runGPUs, pending, free, fits)
	})
}

// Reservations of a dimension the policy leaves unbounded may together
// hold more than an answer's integer: capacity reads 2147483647 there, on
// both surfaces (instances.capacity failed, "the request breaks a
// constraint of the data", and the graph answered an Int past 32 bits).
func TestCapacityPastTheLargestInteger(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "big", map[string]any{"capacity": map[string]any{"gpus": 8}})
	// two rows of 1,500,000,000 GiB each, past what the method admits per
	// reservation, as 300 reservations of 10,000,000 would hold
	if _, err := e.DB.ExecContext(t.Context(), `INSERT INTO reservations (reservation_id, tenant_id, pool_id, gpus, vcpus, memory_gib, starts_at, ends_at)
		SELECT 'rsv_0000000000000000000000000' || g, 'acme', $1, 0, 0, 1500000000, now() - interval '1 minute', now() + interval '1 hour'
		FROM generate_series(1, 2) g`, pool); err != nil {
		t.Fatal(err)
	}
	r := must(t, e.Call(acme.Admin.Token, "instances/capacity", map[string]any{"tenantId": "acme", "poolId": pool}))
	if !strings.Contains(string(r.Raw), `"reserved":{"gpus":0,"vcpus":0,"memoryGiB":2147483647}`) {
		t.Fatalf("capacity: %s", r.Raw)
	}
	d := gqlOK(t, e.GraphQL(acme.Admin.Token, `query($p: ID!) { node(id: $p) { ... on Pool { capacity { reserved { memoryGiB } free { memoryGiB gpus } byTenant { tenantId held { memoryGiB } } } } } }`,
		map[string]any{"p": relay.ID("Pool", pool)}))
	if b, _ := json.Marshal(d); !strings.Contains(string(b), `"reserved":{"memoryGiB":2147483647}`) || !strings.Contains(string(b), `"held":{"memoryGiB":2147483647}`) {
		t.Fatalf("the graph's capacity: %s", b)
	}
}
