package raftnode

import "time"

// Clock is the leader's monotonic time source. Readings are stamped into log
// entries, so they need only be comparable within one process's lifetime;
// wall-clock jumps must not move them.
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
