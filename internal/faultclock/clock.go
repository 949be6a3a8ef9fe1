//go:build raftlock_faults

package faultclock

import (
	"fmt"
	"sync"
	"time"
)

// MaxRate bounds Fault.Rate; rates are relative to the host's monotonic clock.
const MaxRate = 10

// Fault is one command. Zero fields change nothing.
type Fault struct {
	// Rate, when positive, is how fast both clocks run from now on, relative
	// to the host's monotonic clock (1.01: 1 % fast).
	Rate float64 `json:"rate,omitempty"`
	// JumpMonoMs moves the monotonic clock forward at once, with no real
	// time passing (forward only: a monotonic clock never goes back).
	JumpMonoMs int64 `json:"jump_mono_ms,omitempty"`
	// PauseMonoMs makes the monotonic clock stand still for that long and
	// then leap forward by it. Only the clock stops, not the node: on a
	// leader that keeps serving this is beyond the lease bound (grants made
	// during the freeze carry stale stamps, and the leap ends them early).
	// A real pause stops the process too; the checker uses SIGSTOP for that.
	PauseMonoMs int64 `json:"pause_mono_ms,omitempty"`
	// JumpWallMs moves the wall clock by that much, either way.
	JumpWallMs int64 `json:"jump_wall_ms,omitempty"`
}

// State is what GET /debug/clock reports.
type State struct {
	Rate         float64   `json:"rate"`
	MonoNs       int64     `json:"mono_ns"`        // the clock's monotonic reading
	RealNs       int64     `json:"real_ns"`        // host monotonic time since the clock was made
	MonoOffsetNs int64     `json:"mono_offset_ns"` // MonoNs − RealNs
	Wall         time.Time `json:"wall"`
	WallOffsetMs int64     `json:"wall_offset_ms"` // wall jumps so far
	PausedMs     int64     `json:"paused_ms"`      // how long the monotonic clock still stands still
}

// Clock is a raftnode.Clock (monotonic Now, After) with a wall clock beside it.
type Clock struct {
	real func() time.Duration // host monotonic time since origin

	mu         sync.Mutex
	rate       float64
	anchor     int64 // running reading at anchorReal
	anchorReal time.Duration
	frozenAt   int64         // reading shown while paused
	pauseEnd   time.Duration // real time the pause ends; 0: not paused
	last       int64         // highest reading returned: Now never decreases
	wallOrigin time.Time     // wall time at the origin, without a monotonic reading
	wallOffset time.Duration
}

// New returns a clock that reads the host's monotonic clock from now, at rate 1.
func New() *Clock {
	origin := time.Now()
	return newClock(func() time.Duration { return time.Since(origin) }, origin.Round(0))
}

func newClock(real func() time.Duration, wallOrigin time.Time) *Clock {
	return &Clock{real: real, rate: 1, wallOrigin: wallOrigin}
}

// running is the reading with no pause in effect. Caller holds mu.
func (c *Clock) running(r time.Duration) int64 {
	return c.anchor + int64(c.rate*float64(r-c.anchorReal))
}

// Now is the monotonic reading in nanoseconds: never decreasing, whatever
// the faults.
func (c *Clock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked(c.real())
}

func (c *Clock) nowLocked(r time.Duration) int64 {
	v := c.running(r)
	if c.pauseEnd != 0 {
		if r < c.pauseEnd {
			v = c.frozenAt
		} else {
			c.pauseEnd = 0
		}
	}
	c.last = max(c.last, v)
	return c.last
}

// After fires once about d has passed on this clock. It is a wake-up hint,
// as the leader loop uses it: the caller reads Now again when it fires, so
// a rate change or a jump while it waits only makes it early or late.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	rate := c.rate
	c.mu.Unlock()
	return time.After(time.Duration(float64(d) / rate))
}

// Wall is the node's wall clock: the host's wall time when the clock was
// made, plus the monotonic reading since, plus every wall jump. It carries no
// monotonic reading, so comparisons of its values see the jumps, as they
// would after settimeofday.
func (c *Clock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wallLocked(c.real())
}

func (c *Clock) wallLocked(r time.Duration) time.Time {
	return c.wallOrigin.Add(time.Duration(c.nowLocked(r)) + c.wallOffset)
}

// Apply carries out one fault command.
func (c *Clock) Apply(f Fault) error {
	switch {
	case f.Rate < 0 || f.Rate > MaxRate:
		return fmt.Errorf("faultclock: rate %v outside (0, %d]", f.Rate, MaxRate)
	case f.JumpMonoMs < 0:
		return fmt.Errorf("faultclock: jump_mono_ms %d: a monotonic clock only jumps forward", f.JumpMonoMs)
	case f.PauseMonoMs < 0:
		return fmt.Errorf("faultclock: pause_mono_ms %d is negative", f.PauseMonoMs)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.real()
	// Re-anchor so the change applies from now on and the reading stays continuous.
	c.anchor, c.anchorReal = c.running(r), r
	if f.Rate > 0 {
		c.rate = f.Rate
	}
	jump := time.Duration(f.JumpMonoMs) * time.Millisecond
	c.anchor += int64(jump)
	if c.pauseEnd != 0 && r < c.pauseEnd {
		c.frozenAt += int64(jump) // an instant jump shows at once, even while paused
	}
	if p := time.Duration(f.PauseMonoMs) * time.Millisecond; p > 0 {
		if c.pauseEnd == 0 || r >= c.pauseEnd {
			c.frozenAt = c.nowLocked(r)
		}
		c.pauseEnd = max(c.pauseEnd, r+p)
	}
	c.wallOffset += time.Duration(f.JumpWallMs) * time.Millisecond
	return nil
}

// State reports the clock's readings and faults.
func (c *Clock) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.real()
	mono := c.nowLocked(r)
	var paused time.Duration
	if c.pauseEnd != 0 {
		paused = c.pauseEnd - r
	}
	return State{Rate: c.rate, MonoNs: mono, RealNs: int64(r), MonoOffsetNs: mono - int64(r),
		Wall: c.wallLocked(r), WallOffsetMs: c.wallOffset.Milliseconds(), PausedMs: paused.Milliseconds()}
}
