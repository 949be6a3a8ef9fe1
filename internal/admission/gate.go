package admission

import (
	"fmt"
	"sync"
	"time"
)

// Gate admits calls under a Limit, fairly between tenants. With L the
// limit and n the active tenants (those with calls in flight or admitted in
// the last Config.ActiveFor, counting the one asking), a tenant's share is
// L/n (at least 1), and a call is admitted only while its tenant has fewer
// than its share in flight:
//
//   - a tenant below its share is always admitted, however busy the others
//     keep the node: no tenant is shed because of another;
//   - a tenant alone has the whole limit; once another is active, each has
//     its share and no more. Idle capacity is not lent out: what a flood
//     borrows stays in the commit pipeline, and every call there, the calm
//     tenant's too, waits behind it. With the flood held to its share the
//     pipeline runs near the knee, which is what keeps the calm tenant's
//     latency close to what it sees alone (the flood pays in throughput).
//
// Activity is remembered for ActiveFor (250ms), not only while calls are in
// flight: a calm tenant between two calls would otherwise hand the flood
// the whole limit for that moment, and the flood would fill it.
// Priority calls (renews and releases: shedding them loses leases or keeps
// locks held, which brings more load, not less) may use twice the share.
// Other calls are also shed once 2L of them are in flight in all. With up
// to three tenants that cannot happen (each keeps at most the share it had
// when it took its calls: L + L/2 + L/3 < 2L); with more, and above all
// with more tenants than L (every share then 1), it bounds what the shares
// no longer do, and it is the one case where a tenant below its share is
// shed.
type Gate struct {
	limit     *Limit
	now       func() time.Time
	activeFor time.Duration

	mu        sync.Mutex
	inflight  int
	newWork   int                     // in flight and not priority
	tenants   map[string]*tenantState // active tenants (see Gate)
	lastSweep time.Time
}

type tenantState struct {
	inflight int
	last     time.Time // of the last admitted call
}

// NewGate returns a gate over limit; now is its clock (nil: time.Now).
func NewGate(limit *Limit, now func() time.Time) *Gate {
	if now == nil {
		now = time.Now
	}
	return &Gate{limit: limit, now: now, activeFor: limit.cfg.ActiveFor, tenants: map[string]*tenantState{}, lastSweep: now()}
}

// Ticket is an admitted call. Its holder must call Done exactly once.
type Ticket struct {
	g        *Gate
	tenant   *tenantState
	priority bool
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
	return fmt.Sprintf("tenant %q has %d writes in flight, at its share of %d (limit %d); retry later", s.Tenant, s.InFlight, s.Share, s.Limit)
}

// Admit asks for a slot for one call of tenant. It never blocks.
func (g *Gate) Admit(tenant string, priority bool) (*Ticket, *Shed) {
	lim := g.limit.Current()
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now)
	ts := g.tenants[tenant]
	if mine, share, ok := g.allows(ts, lim, priority); !ok {
		return nil, &Shed{Tenant: tenant, InFlight: mine, Share: share, Limit: lim}
	}
	if ts == nil {
		ts = &tenantState{}
		g.tenants[tenant] = ts
	}
	ts.inflight++
	ts.last = now
	g.inflight++
	if !priority {
		g.newWork++
	}
	return &Ticket{g: g, tenant: ts, priority: priority, start: now, inflight: g.inflight}, nil
}

// Check returns the Shed that Admit would answer a call of tenant with
// now, or nil, without taking a slot: a cheap early refusal before the
// request is even parsed. A call it lets pass still goes through Admit,
// which decides.
func (g *Gate) Check(tenant string, priority bool) *Shed {
	lim := g.limit.Current()
	g.mu.Lock()
	defer g.mu.Unlock()
	if mine, share, ok := g.allows(g.tenants[tenant], lim, priority); !ok {
		return &Shed{Tenant: tenant, InFlight: mine, Share: share, Limit: lim}
	}
	return nil
}

// allows applies the share rule (see Gate) to a tenant in state ts (nil:
// not active).
func (g *Gate) allows(ts *tenantState, lim int, priority bool) (mine, share int, ok bool) {
	n := len(g.tenants)
	if ts == nil {
		n++
	} else {
		mine = ts.inflight
	}
	share = max(lim/n, 1)
	if priority {
		return mine, share, mine < 2*share
	}
	// With more tenants than the limit every share is 1, and the shares
	// alone would bound nothing: new work stops at twice the limit. Only
	// new work counts, so a lone tenant's releases (up to 2L with its L
	// acquires) cannot shut a newcomer out.
	return mine, share, mine < share && g.newWork < 2*lim
}

// sweep forgets tenants idle for ActiveFor, at most every quarter of it, so
// the map holds only active tenants (and a few just gone idle).
func (g *Gate) sweep(now time.Time) {
	if now.Sub(g.lastSweep) < g.activeFor/4 {
		return
	}
	g.lastSweep = now
	for name, ts := range g.tenants {
		if ts.inflight == 0 && now.Sub(ts.last) >= g.activeFor {
			delete(g.tenants, name)
		}
	}
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
	n := 0
	for _, ts := range g.tenants {
		if ts.inflight > 0 {
			n++
		}
	}
	return n
}

// Active is the number of tenants the shares are divided by now.
func (g *Gate) Active() int {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now)
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
	if !t.priority {
		g.newWork--
	}
	t.tenant.inflight-- // the tenant stays active until swept (ActiveFor)
	g.mu.Unlock()
	if observe {
		g.limit.Observe(rtt, t.inflight)
	}
}
