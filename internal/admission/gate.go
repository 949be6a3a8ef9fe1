package admission

import (
	"fmt"
	"sync"
	"time"
)

// Gate admits calls under a Limit, fairly between tenants. With L the
// limit and n the tenants that have calls in flight (counting the one
// asking), a tenant's share is L/n (at least 1):
//
//   - a call of a tenant below its share is always admitted, however busy
//     the others keep the node: no tenant is shed because of another;
//   - a call of a tenant at or above its share is admitted only while fewer
//     than L calls are in flight in all (idle capacity is lent out), and is
//     shed otherwise: the tenant over its share is the one shed first.
//
// So in-flight calls stay below 2L (L lent out plus every tenant's share),
// and a flooding tenant holds at most what the others leave free.
// Priority calls (renews and releases: shedding them loses leases or keeps
// locks held, which brings more load, not less) are also admitted while
// fewer than 2L are in flight.
type Gate struct {
	limit *Limit
	now   func() time.Time

	mu       sync.Mutex
	inflight int
	tenants  map[string]int // in flight per tenant; only tenants with calls in flight
}

// NewGate returns a gate over limit; now is its clock (nil: time.Now).
func NewGate(limit *Limit, now func() time.Time) *Gate {
	if now == nil {
		now = time.Now
	}
	return &Gate{limit: limit, now: now, tenants: map[string]int{}}
}

// Ticket is an admitted call. Its holder must call Done exactly once.
type Ticket struct {
	g        *Gate
	tenant   string
	start    time.Time
	inflight int
	done     bool
}

// Shed is the refusal of a call: why, for the client's error message.
type Shed struct {
	Tenant   string
	InFlight int // the tenant's
	Share    int
	Limit    int
}

func (s *Shed) Error() string {
	return fmt.Sprintf("tenant %q has %d writes in flight, at or over its share of %d (limit %d); retry later", s.Tenant, s.InFlight, s.Share, s.Limit)
}

// Admit asks for a slot for one call of tenant. It never blocks.
func (g *Gate) Admit(tenant string, priority bool) (*Ticket, *Shed) {
	lim := g.limit.Current()
	g.mu.Lock()
	defer g.mu.Unlock()
	mine := g.tenants[tenant]
	n := len(g.tenants)
	if mine == 0 {
		n++
	}
	share := max(lim/n, 1)
	ceiling := lim
	if priority {
		ceiling = 2 * lim
	}
	if mine >= share && g.inflight >= ceiling {
		return nil, &Shed{Tenant: tenant, InFlight: mine, Share: share, Limit: lim}
	}
	g.inflight++
	g.tenants[tenant] = mine + 1
	return &Ticket{g: g, tenant: tenant, start: g.now(), inflight: g.inflight}, nil
}

// InFlight is the number of admitted calls not done yet.
func (g *Gate) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// Tenants is the number of tenants with calls in flight.
func (g *Gate) Tenants() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.tenants)
}

// Done frees the slot. observe says whether the call's latency (from
// Admit to now) tells about the pipeline: true for an answer or a timeout
// in it, false for a refusal before it (not leader, bad request).
func (t *Ticket) Done(observe bool) {
	if t.done {
		return
	}
	t.done = true
	g := t.g
	rtt := g.now().Sub(t.start)
	g.mu.Lock()
	g.inflight--
	if m := g.tenants[t.tenant] - 1; m > 0 {
		g.tenants[t.tenant] = m
	} else {
		delete(g.tenants, t.tenant)
	}
	g.mu.Unlock()
	if observe {
		g.limit.Observe(rtt, t.inflight)
	}
}
