package fit

import (
	"encoding/json"
	"math"
)

// Unbounded stands for a capacity the pool does not limit.
const Unbounded = math.MaxInt32

// ProviderTotal is a vps-provider pool's capacity from its policy's
// capacity object (gpus, vcpus, memoryGiB); bounded is false when it names
// none (the provider decides alone).
func ProviderTotal(policy string) (total Resources, bounded bool) {
	var d struct {
		Capacity struct {
			GPUs      int `json:"gpus"`
			VCPUs     int `json:"vcpus"`
			MemoryGiB int `json:"memoryGiB"`
		} `json:"capacity"`
	}
	_ = json.Unmarshal([]byte(policy), &d)
	c := d.Capacity
	bounded = c.GPUs > 0 || c.VCPUs > 0 || c.MemoryGiB > 0
	orMax := func(v int) int {
		if v <= 0 {
			return Unbounded
		}
		return v
	}
	return Resources{orMax(c.GPUs), orMax(c.VCPUs), orMax(c.MemoryGiB)}, bounded
}

// PoolCapacity is a pool's room: total (nil when unbounded), what
// instances hold, what reservations hold beyond that now, and what is free.
type PoolCapacity struct {
	PoolID    string     `json:"poolId" doc:"The pool whose room this is."`
	Bounded   bool       `json:"bounded" doc:"Whether the pool has a total: false only for a provider pool whose policy sets no capacity (then total and free are null)."`
	Total     *Resources `json:"total" doc:"The pool's room (a hosted pool's ready hosts' GPU devices, vCPUs and memory; a provider pool's policy capacity); null when unbounded."`
	Allocated Resources  `json:"allocated" doc:"What the pool's instances hold."`
	Reserved  Resources  `json:"reserved" doc:"What active reservations hold beyond what their tenants' instances hold."`
	Free      *Resources `json:"free" doc:"The total less what every tenant holds (negative when the pool holds more than its total); null when unbounded."`
	// ByTenant is what each tenant holds (numbers only): only for the
	// pool's owner.
	ByTenant map[string]Resources `json:"byTenant,omitempty" doc:"Tenant ids to what each holds (the larger of its instances' and its active reservations' holds), in the owner's view: an empty object when no tenant holds any, absent in the view of a tenant the pool is offered to."`
}

// CapacityOf is the capacity arithmetic of one pool: what each tenant holds
// is the larger of its allocation and its active reservations; ByTenant is
// filled for the owner's view only.
func CapacityOf(poolID string, total Resources, bounded bool, alloc, res map[string]Resources, owner bool) *PoolCapacity {
	c := &PoolCapacity{PoolID: poolID, Bounded: bounded}
	held := map[string]Resources{}
	for t, a := range alloc {
		c.Allocated = c.Allocated.Add(a)
		held[t] = Held(a, res[t])
	}
	for t, r := range res {
		c.Reserved = c.Reserved.Add(Held(alloc[t], r).Sub(alloc[t]))
		if _, ok := held[t]; !ok {
			held[t] = r
		}
	}
	if bounded {
		free := total
		for _, h := range held {
			free = free.Sub(h)
		}
		// A dimension the policy leaves unbounded stays Unbounded in free
		// as in total (instances.capacity's page says so): 2147483647
		// less what instances hold read as a bound that does not exist.
		for _, d := range [...]struct{ total, free *int }{
			{&total.GPUs, &free.GPUs}, {&total.VCPUs, &free.VCPUs}, {&total.MemoryGiB, &free.MemoryGiB},
		} {
			if *d.total == Unbounded {
				*d.free = Unbounded
			}
		}
		c.Total, c.Free = &total, &free
	}
	if owner {
		c.ByTenant = held
	}
	return c.saturated()
}

// saturated is c with every amount at most Unbounded, the largest the
// answers hold (an int4 on the method surface, GraphQL's 32-bit Int):
// reservations of an unbounded dimension may together hold more (230 of
// 10,000,000 GiB of memory made instances.capacity fail, and the graph
// answer an Int past 32 bits).
func (c *PoolCapacity) saturated() *PoolCapacity {
	clamp := func(v int) int { return max(-Unbounded, min(v, Unbounded)) } // free below zero too (a bound lowered under what is held)
	sat := func(r Resources) Resources {
		return Resources{clamp(r.GPUs), clamp(r.VCPUs), clamp(r.MemoryGiB)}
	}
	c.Allocated, c.Reserved = sat(c.Allocated), sat(c.Reserved)
	if c.Free != nil {
		f := sat(*c.Free)
		c.Free = &f
	}
	for t, r := range c.ByTenant {
		c.ByTenant[t] = sat(r)
	}
	return c
}

// MarshalJSON writes byTenant whenever ByTenant is set, an empty object
// when no tenant holds any: its absence says the reader is not the owner's
// (instances.capacity left it out for an owner's empty pool too, where the
// graph answered an empty list).
func (c PoolCapacity) MarshalJSON() ([]byte, error) {
	type plain PoolCapacity
	if c.ByTenant == nil {
		return json.Marshal(plain(c))
	}
	return json.Marshal(struct {
		plain
		ByTenant map[string]Resources `json:"byTenant"`
	}{plain(c), c.ByTenant})
}
