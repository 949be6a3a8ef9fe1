package client

import "time"

// Clock is the source of time for lease deadlines, renewal timing and retry
// backoff. The default is the real clock; tests inject a fake one (WithClock)
// to drive lease time without sleeping. Times returned by Now must carry a
// monotonic reading (or come from a clock that never jumps), since lease
// deadlines are computed from them.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the client uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
