// Package admission decides which client writes may enter Raft: an adaptive
// concurrency limit driven by measured commit latency (Limit), shared fairly
// between tenants (Gate); a budget of parked acquires shared the same way
// (Waiters); and fixed per-tenant caps on what a tenant holds for long
// (Cap, Members). It knows nothing of HTTP or Raft; httpapi feeds it the
// latency of each admitted call.
//
// The controller is the gradient one of Netflix's concurrency-limits (and
// Envoy's adaptive concurrency filter): compare the latency of recent calls
// with the latency the same node shows when unloaded, and scale the limit by
// the ratio. While latency stays within Tolerance of the baseline the limit
// grows by about sqrt(limit) a window (a queue's worth of headroom, so the
// limit keeps probing upward), and by a quarter a window while latency is
// under half-way to the tolerance (so that it comes back within a second
// after a brownout); once latency rises past it, the limit shrinks
// in proportion, down to the concurrency at which the pipeline still
// answers at its unloaded pace. Anything beyond it is shed at once.
package admission

import (
	"math"
	"sync"
	"time"
)

// Config tunes a Limit; zero values take the defaults.
type Config struct {
	// Initial is the limit before any measurement. 0: 32.
	Initial int
	// Min and Max bound the limit. 0: 4 and 256. Max should stay well
	// under the node's hard bound on pending applies (the Gate may let in
	// up to twice the limit, see Gate).
	Min, Max int
	// Tolerance is how far the recent latency may rise above the baseline
	// before the limit shrinks. 0: 2 (twice the unloaded latency).
	Tolerance float64
	// Window is the shortest time over which latency is averaged before
	// the limit moves; a window also needs MinSamples calls. 0: 100ms, 8.
	Window     time.Duration
	MinSamples int
	// Smoothing is the share of sqrt(limit) the limit grows by in a window
	// within tolerance. 0: 0.2.
	Smoothing float64
	// BaselineDrift is the fraction by which the baseline follows a window
	// whose latency is above it, so that a node that got slower for good
	// (another disk, more replicas) is not held to its old pace forever.
	// Only windows that did not fill the limit, or ran at Min, drift it (see
	// update). 0: 0.05 a window (a time constant of about 2 s of them at
	// 100ms windows).
	BaselineDrift float64
	// ActiveFor is how long a tenant still counts for the Gate's shares
	// after its last admitted call. 0: 250ms, longer than the gaps between
	// the calls of a tenant that keeps writing, short enough that a tenant
	// gone quiet leaves the others their whole limit soon.
	ActiveFor time.Duration
	// Now is the clock; nil: time.Now. Tests inject one.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Min <= 0 {
		c.Min = 4
	}
	if c.Max <= 0 {
		c.Max = 256
	}
	if c.Max < c.Min {
		c.Max = c.Min
	}
	if c.Initial <= 0 {
		c.Initial = 32
	}
	c.Initial = min(max(c.Initial, c.Min), c.Max)
	if c.Tolerance <= 1 {
		c.Tolerance = 2
	}
	if c.Window <= 0 {
		c.Window = 100 * time.Millisecond
	}
	if c.MinSamples <= 0 {
		c.MinSamples = 8
	}
	if c.Smoothing <= 0 || c.Smoothing > 1 {
		c.Smoothing = 0.2
	}
	if c.BaselineDrift <= 0 || c.BaselineDrift > 1 {
		c.BaselineDrift = 0.05
	}
	if c.ActiveFor <= 0 {
		c.ActiveFor = 250 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// fastGrowth is the limit's growth a window while latency stays well within
// tolerance (see update).
const fastGrowth = 1.25

// Limit is the adaptive concurrency limit. It is safe for concurrent use.
type Limit struct {
	cfg Config

	mu       sync.Mutex
	limit    float64
	baseline time.Duration // unloaded latency estimate; 0 until the first window
	last     time.Duration // average latency of the last window

	// The current window.
	start       time.Time
	sum         time.Duration
	n           int
	maxInflight int
}

// NewLimit returns a controller at cfg.Initial.
func NewLimit(cfg Config) *Limit {
	cfg.setDefaults()
	return &Limit{cfg: cfg, limit: float64(cfg.Initial), start: cfg.Now()}
}

// Current is the limit now: how many calls may be in flight.
func (l *Limit) Current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// Latencies returns the baseline (unloaded) estimate and the last window's
// average, for metrics.
func (l *Limit) Latencies() (baseline, recent time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.baseline, l.last
}

// Observe records one call that took rtt with inflight calls in flight
// (itself included) when it started. Only calls that reached the pipeline
// and came back with an answer, or timed out in it, should be observed: a
// refusal before the pipeline says nothing of its latency.
func (l *Limit) Observe(rtt time.Duration, inflight int) {
	if rtt <= 0 {
		rtt = time.Microsecond
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sum += rtt
	l.n++
	l.maxInflight = max(l.maxInflight, inflight)
	now := l.cfg.Now()
	if l.n < l.cfg.MinSamples || now.Sub(l.start) < l.cfg.Window {
		return
	}
	avg := l.sum / time.Duration(l.n)
	used := l.maxInflight
	l.start, l.sum, l.n, l.maxInflight = now, 0, 0, 0
	l.update(avg, used)
}

// update moves the limit after a window of average latency avg in which at
// most used calls were in flight.
func (l *Limit) update(avg time.Duration, used int) {
	l.last = avg
	switch {
	case l.baseline == 0 || avg < l.baseline:
		l.baseline = avg
	case float64(used) < l.limit/2 || int(l.limit) <= l.cfg.Min:
		// Only a window the limit did not fill (or one at the floor, which
		// would otherwise stay there for good) may raise the baseline:
		// under sustained overload every window is above it, and following
		// them would let the limit creep up with the latency.
		l.baseline += time.Duration(float64(avg-l.baseline) * l.cfg.BaselineDrift)
	}
	gradient := l.cfg.Tolerance * float64(l.baseline) / float64(avg)
	gradient = min(max(gradient, 0.5), 1) // growth is by headroom only, below
	if gradient >= 1 && float64(used) < l.limit/2 {
		// The clients, not the limit, bounded this window: it is no
		// evidence that a higher limit would be served as fast.
		return
	}
	var next float64
	if gradient < 1 {
		// Over tolerance: shrink in proportion, half-way at once (one slow
		// window, a GC pause or an fsync hiccup, must not halve the limit).
		next = l.limit * (1 - (1-gradient)/2)
	} else {
		// Within tolerance: grow by a queue's worth of headroom, smoothed.
		next = l.limit + math.Sqrt(l.limit)*l.cfg.Smoothing
		if float64(avg) <= float64(l.baseline)*(1+(l.cfg.Tolerance-1)/2) {
			// Well within it (under half-way to the tolerance): the
			// pipeline is far from its knee, as after a brownout or a burst
			// that came and went, so the limit returns by a quarter a
			// window (64 to 256 in 7 windows) instead of creeping back by
			// sqrt(limit) (70 windows). Near the knee it grows slowly again.
			next = max(next, l.limit*fastGrowth)
		}
	}
	l.limit = min(max(next, float64(l.cfg.Min)), float64(l.cfg.Max))
}
