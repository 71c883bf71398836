package fit

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestInstanceFitsQuota(t *testing.T) {
	cases := []struct {
		quota, used QuotaUse
		gpus        int
		ok          bool
	}{
		{QuotaUse{2, 8}, QuotaUse{0, 0}, 8, true},
		{QuotaUse{2, 8}, QuotaUse{1, 4}, 4, true},
		{QuotaUse{2, 8}, QuotaUse{1, 4}, 5, false},
		{QuotaUse{2, 8}, QuotaUse{2, 0}, 0, false},
		{QuotaUse{0, 0}, QuotaUse{0, 0}, 0, false},
		{QuotaUse{5, 0}, QuotaUse{1, 0}, 0, true},
		// An offer lowered below use refuses new instances.
		{QuotaUse{1, 2}, QuotaUse{3, 6}, 0, false},
	}
	for _, c := range cases {
		if got := InstanceFitsQuota(c.quota, c.used, c.gpus); got != c.ok {
			t.Errorf("quota %v used %v +%d: %v, want %v", c.quota, c.used, c.gpus, got, c.ok)
		}
	}
}

func TestReservationArithmetic(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	g := func(n int) Resources { return Resources{GPUs: n} }
	ws := []Window{
		{TenantID: "a", Start: h(0), End: h(4), Res: g(2)},
		{TenantID: "a", Start: h(2), End: h(6), Res: g(3)},
		{TenantID: "b", Start: h(5), End: h(8), Res: g(4)},
	}
	for _, c := range []struct {
		from, to int
		peak     int
	}{{0, 2, 2}, {0, 3, 5}, {4, 5, 3}, {4, 6, 7}, {6, 8, 4}, {8, 9, 0}} {
		if got := PeakReserved(ws, h(c.from), h(c.to)).GPUs; got != c.peak {
			t.Errorf("peak [%d,%d) = %d, want %d", c.from, c.to, got, c.peak)
		}
	}
	mine := ws[:2]
	for _, c := range []struct {
		quota, start, end, gpus int
		ok                      bool
	}{
		{5, 6, 8, 5, true},  // after both
		{5, 3, 5, 1, false}, // overlaps the 2+3 peak
		{6, 3, 5, 1, true},
		{5, 4, 5, 2, true}, // only the second one is active then
		{5, 4, 5, 3, false},
	} {
		w := Window{TenantID: "a", Start: h(c.start), End: h(c.end), Res: g(c.gpus)}
		if got := ReservationFitsQuota(c.quota, mine, w); got != c.ok {
			t.Errorf("quota %d + %d GPUs [%d,%d): %v, want %v", c.quota, c.gpus, c.start, c.end, got, c.ok)
		}
	}
	// Capacity: instances count as held, reservations beyond them too.
	total := Resources{GPUs: 8, VCPUs: 100, MemoryGiB: 100}
	alloc := map[string]Resources{"a": g(1), "c": g(3)}
	for _, c := range []struct {
		start, end, gpus int
		ok               bool
	}{
		{0, 1, 3, true},  // a holds max(1, 2) = 2, c 3, new 3 = 8
		{0, 1, 4, false}, // 9
		{2, 3, 1, true},  // a holds 5, c 3 = 8, new 1 from "d" = 9? no: see below
	} {
		w := Window{TenantID: "d", Start: h(c.start), End: h(c.end), Res: g(c.gpus)}
		want := c.ok
		if c.start == 2 {
			want = false // a 5 + c 3 + d 1 = 9
		}
		if got := ReservationFitsCapacity(total, alloc, ws, w); got != want {
			t.Errorf("capacity + %d GPUs [%d,%d): %v, want %v", c.gpus, c.start, c.end, got, want)
		}
	}
	// A tenant's own reservation covers its instances.
	if !ReservationFitsCapacity(total, map[string]Resources{"a": g(5)}, nil, Window{TenantID: "a", Start: h(0), End: h(1), Res: g(8)}) {
		t.Error("a tenant's reservation over its own instances does not count them twice")
	}
}

func TestInstanceFits(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := func(n int) time.Time { return now.Add(time.Duration(n) * time.Hour) }
	total := Resources{GPUs: 8, VCPUs: 64, MemoryGiB: 512}
	alloc := map[string]Resources{"a": {2, 8, 32}, "b": {1, 4, 16}}
	active := []Window{
		{TenantID: "b", Start: h(-1), End: h(2), Res: Resources{4, 16, 64}},
		{TenantID: "c", Start: h(-1), End: h(2), Res: Resources{1, 0, 0}},
	}
	for _, c := range []struct {
		tenant string
		need   Resources
		ok     bool
	}{
		// b holds max(instances, reserved) = 4 GPUs, c its reservation, a
		// its instances: a has 1 GPU of room, 40 vCPUs, 416 GiB.
		{"a", Resources{1, 40, 416}, true},
		{"a", Resources{2, 1, 1}, false},
		{"a", Resources{1, 41, 1}, false},
		// b may use its own reserved room: others hold a 2 and c 1.
		{"b", Resources{4, 52, 464}, true},
		{"b", Resources{5, 1, 1}, false},
		{"d", Resources{1, 40, 416}, true},
		{"d", Resources{1, 40, 417}, false},
	} {
		if got := InstanceFits(total, alloc, active, c.tenant, c.need, now); got != c.ok {
			t.Errorf("%s + %v: %v, want %v", c.tenant, c.need, got, c.ok)
		}
	}
	// A reservation still to come holds its room from now on for
	// instances, which have no end: c reserves 4 GPUs from the second
	// hour, when the active windows have ended and a 2 + b 1 + c 4 = 7
	// are held.
	later := append(append([]Window{}, active...), Window{TenantID: "c", Start: h(2), End: h(5), Res: Resources{GPUs: 4}})
	if !InstanceFits(total, alloc, later, "a", Resources{GPUs: 1}, now) {
		t.Error("a's 1 GPU: room now, and 8 held when c's window opens")
	}
	if InstanceFits(total, alloc, later, "a", Resources{GPUs: 2}, now) {
		t.Error("a's 2 GPUs would be 9 held when c's window opens")
	}
	// One that overlaps the active ones: at its start c holds 1 + 4.
	overlapping := append(append([]Window{}, active...), Window{TenantID: "c", Start: h(1), End: h(5), Res: Resources{GPUs: 4}})
	if InstanceFits(total, alloc, overlapping, "d", Resources{GPUs: 1}, now) {
		t.Error("at the second window's start a 2 + b 4 + c 5 = 11 are held already")
	}
	// The reserving tenant's own instance runs inside its window to come.
	mine := []Window{{TenantID: "d", Start: h(1), End: h(3), Res: Resources{GPUs: 5}}}
	if !InstanceFits(total, alloc, mine, "d", Resources{GPUs: 5}, now) {
		t.Error("d's instance inside d's own reservation to come")
	}
	if InstanceFits(total, alloc, mine, "a", Resources{GPUs: 1}, now) {
		t.Error("a's instance in d's room to come: a 3 + b 1 + d 5 = 9")
	}
	// A window that has ended holds nothing.
	ended := []Window{{TenantID: "c", Start: h(-3), End: h(-1), Res: Resources{GPUs: 8}}}
	if !InstanceFits(total, alloc, ended, "a", Resources{GPUs: 5}, now) {
		t.Error("an ended reservation still counted")
	}
}

// TestFitsOverAgreesWithEveryMoment: the sweep decides as checking what is
// held at the start of the range and at every window start inside it,
// over random windows, tenants and instances.
func TestFitsOverAgreesWithEveryMoment(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	tenants := []string{"a", "b", "c", "d"}
	brute := func(total Resources, alloc map[string]Resources, ws []Window, from, to time.Time) bool {
		for _, m := range breakpoints(ws, from, to) {
			byTenant := map[string]Resources{}
			for _, x := range ws {
				if !m.Before(x.Start) && m.Before(x.End) {
					byTenant[x.TenantID] = byTenant[x.TenantID].Add(x.Res)
				}
			}
			var held Resources
			for _, tn := range tenants {
				held = held.Add(Held(alloc[tn], byTenant[tn]))
			}
			if !total.Fits(held) {
				return false
			}
		}
		return true
	}
	yes := 0
	for k := 0; k < 3000; k++ {
		var ws []Window
		for n := rng.IntN(12); n > 0; n-- {
			s := rng.IntN(20)
			ws = append(ws, Window{TenantID: tenants[rng.IntN(4)], Start: at(s), End: at(s + 1 + rng.IntN(6)),
				Res: Resources{GPUs: rng.IntN(4), VCPUs: rng.IntN(8), MemoryGiB: rng.IntN(8)}})
		}
		alloc := map[string]Resources{}
		for _, tn := range tenants[:rng.IntN(5)] {
			alloc[tn] = Resources{GPUs: rng.IntN(3), VCPUs: rng.IntN(6), MemoryGiB: rng.IntN(6)}
		}
		total := Resources{GPUs: 4 + rng.IntN(8), VCPUs: 8 + rng.IntN(16), MemoryGiB: 8 + rng.IntN(16)}
		from := at(rng.IntN(20))
		to := from.Add(time.Duration(1+rng.IntN(10)) * time.Minute)
		if rng.IntN(4) == 0 {
			to = endOfTime
		}
		got, want := fitsOver(total, alloc, ws, from, to), brute(total, alloc, ws, from, to)
		if got != want {
			t.Fatalf("case %d: the sweep says %v, every moment %v: total %v alloc %v windows %v [%s, %s)", k, got, want, total, alloc, ws, from, to)
		}
		if got {
			yes++
		}
	}
	if yes < 300 || yes > 2700 {
		t.Fatalf("%d of 3000 random cases fit: the cases do not test both answers", yes)
	}
}

// An unbounded dimension (Unbounded, as ProviderTotal reads a dimension the
// policy leaves out) holds any amount, however much reservations and
// instances hold of it together: it was a bound of 2147483647.
func TestUnboundedDimensionsHoldAnything(t *testing.T) {
	total, bounded := ProviderTotal(`{"capacity": {"gpus": 8}}`)
	if !bounded || !total.Fits(Resources{GPUs: 8, VCPUs: 1 << 40, MemoryGiB: 1 << 40}) || total.Fits(Resources{GPUs: 9}) {
		t.Fatalf("total %+v", total)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ws []Window
	for i := 0; i < 300; i++ {
		ws = append(ws, Window{TenantID: "a", Start: t0, End: t0.Add(time.Hour), Res: Resources{MemoryGiB: 10_000_000}})
	}
	w := Window{TenantID: "a", Start: t0, End: t0.Add(time.Hour), Res: Resources{GPUs: 1, MemoryGiB: 10_000_000}}
	if !ReservationFitsCapacity(total, map[string]Resources{"b": {VCPUs: 1 << 31}}, ws, w) {
		t.Fatal("a reservation of an unbounded dimension does not fit")
	}
}
