package client

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when the test calls Advance.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	created []time.Duration // durations of all timers made, in order
}

type fakeTimer struct {
	clk *fakeClock
	at  time.Time
	ch  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clk: f, at: f.now.Add(d), ch: make(chan time.Time, 1)}
	f.created = append(f.created, d)
	if d <= 0 {
		t.ch <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	f := t.clk
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock by d and fires the timers that are due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	keep := f.timers[:0]
	for _, t := range f.timers {
		if t.at.After(f.now) {
			keep = append(keep, t)
			continue
		}
		t.ch <- f.now
	}
	f.timers = keep
}

// Pending returns the durations until the pending timers fire, soonest first.
func (f *fakeClock) Pending() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ds []time.Duration
	for _, t := range f.timers {
		ds = append(ds, t.at.Sub(f.now))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds
}

// WaitPending waits (in real time, bounded) until n timers are pending, and
// returns their durations.
func (f *fakeClock) WaitPending(t testing.TB, n int) []time.Duration {
	t.Helper()
	var ds []time.Duration
	eventually(t, func() bool { ds = f.Pending(); return len(ds) >= n }, "%d pending timers", n)
	return ds
}

// eventually polls cond until it holds or 10s pass.
func eventually(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(time.Millisecond)
	}
}
