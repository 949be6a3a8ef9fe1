package admission

import (
	"fmt"
	"sync"
)

// Waiters shares a budget of parked acquires (acquires that asked to wait
// for a held lock) fairly between tenants. A parked acquire costs the
// pipeline nothing until its grant, so the Gate does not count it; what it
// holds is a place in the leader's bounded wait queues, for up to wait_ms.
// Without a per-tenant count, one tenant parking thousands of waiters would
// fill the node's bound and every other tenant's next wait would be refused.
//
// With B the budget and n the tenants with parked acquires (counting the
// one asking), a tenant may park while it has fewer than B/n (at least 1):
// alone it may use the whole budget; once another tenant parks, the first
// one parks no more until it is below its new share. There is no lending:
// a parked acquire may stay for minutes, so capacity lent out would not
// come back in time. Nothing already parked is ever refused.
//
// Parked acquires may exceed B when tenants arrive one after another (each
// keeps what it parked under its share at the time), but stay under 2B
// with up to three tenants parking: the node's own bound on parked
// acquires should be at least 2B, so that a tenant within its share is
// never refused there because of the others.
type Waiters struct {
	budget int

	mu      sync.Mutex
	total   int
	tenants map[string]int // parked per tenant; only tenants with some
}

// NewWaiters returns a count of parked acquires under budget (at least 1).
func NewWaiters(budget int) *Waiters {
	return &Waiters{budget: max(budget, 1), tenants: map[string]int{}}
}

// Parked is one admitted wait. Its holder must call Done once, when the
// acquire is answered.
type Parked struct {
	w      *Waiters
	tenant string
	done   bool
}

// WaitShed is the refusal of a wait: the tenant already has its share of
// parked acquires.
type WaitShed struct {
	Tenant string
	Parked int // the tenant's
	Share  int
}

func (s *WaitShed) Error() string {
	return fmt.Sprintf("tenant %q has %d acquires waiting, at its share of %d; retry later", s.Tenant, s.Parked, s.Share)
}

// Park asks for a place for one waiting acquire of tenant. It never blocks.
func (w *Waiters) Park(tenant string) (*Parked, *WaitShed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if shed := w.check(tenant); shed != nil {
		return nil, shed
	}
	w.total++
	w.tenants[tenant]++
	return &Parked{w: w, tenant: tenant}, nil
}

// Check returns the refusal Park would answer now, or nil, without taking
// a place.
func (w *Waiters) Check(tenant string) *WaitShed {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.check(tenant)
}

func (w *Waiters) check(tenant string) *WaitShed {
	mine := w.tenants[tenant]
	n := len(w.tenants)
	if mine == 0 {
		n++
	}
	if share := max(w.budget/n, 1); mine >= share {
		return &WaitShed{Tenant: tenant, Parked: mine, Share: share}
	}
	return nil
}

// Done gives the place back. A second call does nothing.
func (p *Parked) Done() {
	if p == nil || p.done {
		return
	}
	p.done = true
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total--
	if m := w.tenants[p.tenant] - 1; m > 0 {
		w.tenants[p.tenant] = m
	} else {
		delete(w.tenants, p.tenant)
	}
}

// Total is the number of parked acquires counted.
func (w *Waiters) Total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// Of is the number of parked acquires of tenant.
func (w *Waiters) Of(tenant string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tenants[tenant]
}
