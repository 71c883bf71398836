package fit

import (
	"sort"
	"time"
)

// Resources is an amount of pool capacity.
type Resources struct {
	GPUs      int `json:"gpus" doc:"GPUs, counted after the pool's sharing mode (whole GPUs, MIG devices or time slices)."`
	VCPUs     int `json:"vcpus" doc:"Virtual CPUs."`
	MemoryGiB int `json:"memoryGiB" doc:"Memory in GiB."`
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.GPUs + o.GPUs, r.VCPUs + o.VCPUs, r.MemoryGiB + o.MemoryGiB}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{r.GPUs - o.GPUs, r.VCPUs - o.VCPUs, r.MemoryGiB - o.MemoryGiB}
}

// Max is the component-wise maximum.
func (r Resources) Max(o Resources) Resources {
	return Resources{max(r.GPUs, o.GPUs), max(r.VCPUs, o.VCPUs), max(r.MemoryGiB, o.MemoryGiB)}
}

// Fits reports whether need fits in r, component-wise.
func (r Resources) Fits(need Resources) bool {
	// An Unbounded dimension holds any amount: 2147483647 is how an
	// unbounded one reads, not a bound (213 reservations of 10,000,000
	// GiB of memory each filled a pool whose policy bounds GPUs only).
	within := func(have, want int) bool { return have == Unbounded || want <= have }
	return within(r.GPUs, need.GPUs) && within(r.VCPUs, need.VCPUs) && within(r.MemoryGiB, need.MemoryGiB)
}

// Window is one reservation's hold: Res in [Start, End).
type Window struct {
	TenantID   string
	Start, End time.Time
	Res        Resources
}

// reservedAt sums the windows active at t.
func reservedAt(ws []Window, t time.Time) Resources {
	var r Resources
	for _, w := range ws {
		if !t.Before(w.Start) && t.Before(w.End) {
			r = r.Add(w.Res)
		}
	}
	return r
}

// breakpoints are the times in [from, to) at which the windows' sum can
// change upward: from itself and every window start inside the range.
func breakpoints(ws []Window, from, to time.Time) []time.Time {
	out := []time.Time{from}
	for _, w := range ws {
		if w.Start.After(from) && w.Start.Before(to) {
			out = append(out, w.Start)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// PeakReserved is the component-wise peak of the windows' sum over
// [from, to).
func PeakReserved(ws []Window, from, to time.Time) Resources {
	var peak Resources
	for _, t := range breakpoints(ws, from, to) {
		peak = peak.Max(reservedAt(ws, t))
	}
	return peak
}

// Held is what a tenant holds in a pool at a time: its instances run inside
// its reservations first, so it holds the larger of the two.
func Held(alloc, reserved Resources) Resources { return alloc.Max(reserved) }

// QuotaUse is an offered tenant's use of its quota in one pool.
type QuotaUse struct {
	Instances int `json:"instances"`
	GPUs      int `json:"gpus"`
}

// InstanceFitsQuota reports whether one more instance of gpus GPUs fits an
// offer's quota, given the tenant's live instances. Reservations do not
// change this: instances use the tenant's reserved room first, so the GPUs
// held are max(instances, reservations), and reservations are checked
// against the quota when they are made.
func InstanceFitsQuota(quota, used QuotaUse, gpus int) bool {
	return used.Instances+1 <= quota.Instances && used.GPUs+gpus <= quota.GPUs
}

// ReservationFitsQuota reports whether a new reservation keeps the tenant's
// reserved GPUs in the pool within the quota at every moment of its window.
func ReservationFitsQuota(quotaGPUs int, existing []Window, w Window) bool {
	all := append(append([]Window{}, existing...), w)
	return PeakReserved(all, w.Start, w.End).GPUs <= quotaGPUs
}

// InstanceFits reports whether a tenant's new instance of need fits the
// pool. An instance holds its room from its placement until it is deleted,
// with no end, so it fits when what all tenants hold with it (per tenant
// the larger of its instances and its reservations active then) stays
// within the total now and at the start of every reservation still to
// come. A tenant's own reservation is room only it may use. (Placements
// counted only the reservations active now: other tenants' instances took
// a reservation's room before its window, and when it opened the pool held
// more than its capacity and the reserving tenant's instance waited.)
func InstanceFits(total Resources, alloc map[string]Resources, ws []Window, tenantID string, need Resources, now time.Time) bool {
	with := make(map[string]Resources, len(alloc)+1)
	for t, a := range alloc {
		with[t] = a
	}
	with[tenantID] = with[tenantID].Add(need)
	return fitsOver(total, with, ws, now, endOfTime)
}

// endOfTime is later than any reservation's end.
var endOfTime = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// fitsOver reports whether, at every moment of [from, to), what all
// tenants hold stays within total: per tenant the larger of its instances
// (alloc) and its windows active then. It sweeps the windows' ends and
// starts in time order, so a pool's placement under its lock costs
// n log n in its reservations (a tenant may hold thousands), not n².
func fitsOver(total Resources, alloc map[string]Resources, ws []Window, from, to time.Time) bool {
	type edge struct {
		at     time.Time
		tenant string
		res    Resources
		start  bool
	}
	reserved := map[string]Resources{}
	var edges []edge
	for _, w := range ws {
		if !w.End.After(from) || !w.Start.Before(to) {
			continue
		}
		if w.Start.After(from) {
			edges = append(edges, edge{w.Start, w.TenantID, w.Res, true})
		} else {
			reserved[w.TenantID] = reserved[w.TenantID].Add(w.Res)
		}
		if w.End.Before(to) {
			edges = append(edges, edge{w.End, w.TenantID, w.Res, false})
		}
	}
	var held Resources
	for t, a := range alloc {
		held = held.Add(Held(a, reserved[t]))
	}
	for t, r := range reserved {
		if _, ok := alloc[t]; !ok {
			held = held.Add(r)
		}
	}
	if !total.Fits(held) {
		return false
	}
	sort.Slice(edges, func(i, j int) bool { return edges[i].at.Before(edges[j].at) })
	for i := 0; i < len(edges); {
		at := edges[i].at
		for ; i < len(edges) && edges[i].at.Equal(at); i++ {
			e := edges[i]
			before := Held(alloc[e.tenant], reserved[e.tenant])
			if e.start {
				reserved[e.tenant] = reserved[e.tenant].Add(e.res)
			} else {
				reserved[e.tenant] = reserved[e.tenant].Sub(e.res)
			}
			held = held.Add(Held(alloc[e.tenant], reserved[e.tenant])).Sub(before)
		}
		// Every edge at one instant applied (windows are [start, end)):
		// what is held from then on.
		if !total.Fits(held) {
			return false
		}
	}
	return true
}

// ReservationFitsCapacity reports whether a new reservation fits the pool:
// at every moment of its window, what all tenants hold (instances now, or
// reservations then, per tenant the larger) stays within the total.
func ReservationFitsCapacity(total Resources, alloc map[string]Resources, existing []Window, w Window) bool {
	return fitsOver(total, alloc, append(append([]Window{}, existing...), w), w.Start, w.End)
}
