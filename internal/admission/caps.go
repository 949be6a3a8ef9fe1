package admission

import (
	"fmt"
	"sync"
	"time"
)

// Cap is a fixed bound on what one tenant may hold at once of one kind of
// long-lived thing (a parked acquire, a parked blocking read): unlike the
// Gate and Waiters, whose shares move with the load and the number of
// tenants, a Cap says how far any one tenant may ramp, whatever the others
// do, so that one tenant's goroutines, connections' worth of requests and
// memory stay bounded while it ramps. What it counts is only what is held
// now; nothing waits for a place.
//
// A refusal says when to retry, and that time grows with how often the
// tenant is being refused (pushback): clients over their cap that retry as
// told then come back at about PushbackRate a second in all, however many
// they are, instead of each once a second. A refused request costs the node
// a request's parse and answer; a parked one costs no CPU, so without
// pushback a cap would turn a ramp of cheap parked requests into a stream
// of refusals that costs more than the ramp.
type Cap struct {
	what string
	max  int
	now  func() time.Time

	mu          sync.Mutex
	held        map[string]int // only tenants with some
	windowStart time.Time
	refused     map[string]int // in the window that started at windowStart
	lastRefused map[string]int // in the window before
}

// PushbackRate is the refusals a second per tenant that a cap's retry
// times aim at; MinRetry and MaxRetry bound them.
const (
	PushbackRate = 100
	MinRetry     = time.Second
	MaxRetry     = 30 * time.Second
)

// NewCap returns a cap of max (at least 1) things called what (for the
// refusal's message) per tenant; now is its clock (nil: time.Now).
func NewCap(what string, max int, now func() time.Time) *Cap {
	if now == nil {
		now = time.Now
	}
	return &Cap{what: what, max: max1(max), now: now, held: map[string]int{}, refused: map[string]int{}, lastRefused: map[string]int{}}
}

func max1(n int) int { return max(n, 1) }

// CapShed is the refusal of one more: the tenant is at its cap.
type CapShed struct {
	Tenant string
	What   string
	Held   int
	Max    int
	// RetryAfter is when to try again (see Cap: pushback).
	RetryAfter time.Duration
}

func (s *CapShed) Error() string {
	return fmt.Sprintf("tenant %q has %d %s, at its cap of %d; retry later", s.Tenant, s.Held, s.What, s.Max)
}

// Held is one place taken; its holder calls Release once (nil-safe; a
// second call does nothing).
type Held struct {
	c      *Cap
	tenant string
	once   sync.Once
}

// Take takes a place for tenant, or refuses at once. It never blocks.
func (c *Cap) Take(tenant string) (*Held, *CapShed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.held[tenant]; n >= c.max {
		return nil, c.refuse(tenant, n)
	}
	c.held[tenant]++
	return &Held{c: c, tenant: tenant}, nil
}

// Check refuses as Take would, without taking a place: a cheap early
// refusal. A request it lets pass still goes through Take.
func (c *Cap) Check(tenant string) *CapShed {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.held[tenant]; n >= c.max {
		return c.refuse(tenant, n)
	}
	return nil
}

// refuse counts one refusal of tenant, holding n, and says when to retry:
// the tenant's refusals a second (the fuller of this window and the last)
// over PushbackRate, in seconds, within [MinRetry, MaxRetry].
func (c *Cap) refuse(tenant string, n int) *CapShed {
	now := c.now()
	if d := now.Sub(c.windowStart); d >= time.Second {
		c.lastRefused = c.refused
		if d >= 2*time.Second {
			clear(c.lastRefused) // no refusal in the window before this one
		}
		c.refused = map[string]int{}
		c.windowStart = now
	}
	c.refused[tenant]++
	rate := max(c.refused[tenant], c.lastRefused[tenant])
	retry := min(max(time.Duration(rate)*time.Second/PushbackRate, MinRetry), MaxRetry)
	return &CapShed{Tenant: tenant, What: c.what, Held: n, Max: c.max, RetryAfter: retry}
}

// Release gives the place back.
func (h *Held) Release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		c := h.c
		c.mu.Lock()
		defer c.mu.Unlock()
		if n := c.held[h.tenant] - 1; n > 0 {
			c.held[h.tenant] = n
		} else {
			delete(c.held, h.tenant)
		}
	})
}

// Of is what tenant holds now.
func (c *Cap) Of(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[tenant]
}

// Max is the cap.
func (c *Cap) Max() int { return c.max }

// Members counts live members per tenant (sessions a tenant created) that
// end in two ways: by a call here (a close) or silently elsewhere (an
// expiry in the state machine), which Reserve learns of by asking, at the
// cap only and at most every PruneEvery per tenant: a tenant creating at
// its cap costs one look at its members per interval, not one per create.
// Reserve takes a place before the member exists, so concurrent creates
// cannot both take the last one.
type Members struct {
	what string
	max  int
	now  func() time.Time

	mu      sync.Mutex
	tenants map[string]*members
}

type members struct {
	ids       map[string]bool
	pending   int
	lastPrune time.Time
}

// PruneEvery is how often, at most, Reserve asks which members of a tenant
// at its cap are still alive.
const PruneEvery = 100 * time.Millisecond

// NewMembers returns a count of at most max (at least 1) members per
// tenant; now is its clock (nil: time.Now).
func NewMembers(what string, max int, now func() time.Time) *Members {
	if now == nil {
		now = time.Now
	}
	return &Members{what: what, max: max1(max), now: now, tenants: map[string]*members{}}
}

// Reserve takes a place for one new member of tenant. At the cap it first
// forgets the members alive reports gone (nil: none), then refuses if the
// tenant is still at its cap. The caller must end the reservation with
// Commit or Cancel.
func (m *Members) Reserve(tenant string, alive func(id string) bool) (*Reservation, *CapShed) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tenants[tenant]
	if t == nil {
		t = &members{ids: map[string]bool{}}
		m.tenants[tenant] = t
	}
	if now := m.now(); len(t.ids)+t.pending >= m.max && alive != nil && now.Sub(t.lastPrune) >= PruneEvery {
		t.lastPrune = now
		for id := range t.ids {
			if !alive(id) {
				delete(t.ids, id)
			}
		}
	}
	if n := len(t.ids) + t.pending; n >= m.max {
		return nil, &CapShed{Tenant: tenant, What: m.what, Held: n, Max: m.max}
	}
	t.pending++
	return &Reservation{m: m, tenant: tenant}, nil
}

// Reservation is a place reserved for a member not yet created.
type Reservation struct {
	m      *Members
	tenant string
	done   bool
}

// Commit turns the place into member id (already counted: a retried
// create of the same id, it only frees the place).
func (r *Reservation) Commit(id string) { r.end(id) }

// Cancel frees the place: the member was not created.
func (r *Reservation) Cancel() { r.end("") }

func (r *Reservation) end(id string) {
	if r == nil || r.done {
		return
	}
	r.done = true
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tenants[r.tenant]
	t.pending--
	if id != "" {
		t.ids[id] = true
	}
	if len(t.ids) == 0 && t.pending == 0 {
		delete(m.tenants, r.tenant)
	}
}

// Remove forgets member id of tenant (it ended here: a close).
func (m *Members) Remove(tenant, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.tenants[tenant]; t != nil {
		delete(t.ids, id)
		if len(t.ids) == 0 && t.pending == 0 {
			delete(m.tenants, tenant)
		}
	}
}

// Of is the number of members of tenant counted now, reservations
// included (some may have ended unseen since the last look).
func (m *Members) Of(tenant string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.tenants[tenant]; t != nil {
		return len(t.ids) + t.pending
	}
	return 0
}
