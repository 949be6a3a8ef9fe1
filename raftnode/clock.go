package raftnode

import "time"

// Clock is the leader's monotonic time source. Readings are stamped into log
// entries, so they need only be comparable within one process's lifetime;
// wall-clock jumps must not move them.
//
// It is the node's only time that bears on leases: stamps (apply), the
// projected FSM clock of heldHere and untilNextTick, and the leader loop's
// wake-ups. Nothing in the node reads the wall clock for leases. The other
// time reads here (an acquire's wait_ms, retry and poll intervals) only
// bound waits, and hashicorp/raft's election and heartbeat timers use Go's
// monotonic clock directly, out of this interface's reach. A raftlock_faults
// build runs the node on internal/faultclock through this interface.
type Clock interface {
	Now() int64 // nanoseconds since an arbitrary origin, never decreasing
	After(d time.Duration) <-chan time.Time
}

// SystemClock reads Go's monotonic clock.
type SystemClock struct{ origin time.Time }

// NewSystemClock returns a clock whose origin is now.
func NewSystemClock() *SystemClock { return &SystemClock{origin: time.Now()} }

// Now returns the monotonic time since the clock was made; time.Since uses
// the monotonic reading, so setting the wall clock does not change it.
func (c *SystemClock) Now() int64 { return int64(time.Since(c.origin)) }

// After is time.After.
func (c *SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
