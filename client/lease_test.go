package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const testTTL = 3 * time.Second

// acquireTest takes lock "a" with TTL testTTL on a fake cluster of n nodes,
// with a fake clock.
func acquireTest(t *testing.T, n int, opts ...Option) (*fakeCluster, *Client, *fakeClock, *Lease) {
	t.Helper()
	fc := startFake(t, n)
	c, clk := newTestClient(t, fc.Endpoints(), opts...)
	l, err := c.TryAcquire(context.Background(), "a", AcquireOptions{TTL: testTTL, Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return fc, c, clk, l
}

// waitClosed waits (in real time, bounded) for ch to be closed.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLeaseDeadline(t *testing.T) {
	for _, drift := range []float64{0, DefaultDrift, 0.1} {
		fc := startFake(t, 1)
		c, clk := newTestClient(t, fc.Endpoints(), WithDrift(drift))
		sent := clk.Now()
		l, err := c.TryAcquire(context.Background(), "a", AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		want := sent.Add(time.Duration(float64(10*time.Second) * (1 - drift)))
		if !l.Deadline().Equal(want) {
			t.Errorf("drift %v: deadline %v after send, want %v", drift, l.Deadline().Sub(sent), want.Sub(sent))
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatchdogRenews(t *testing.T) {
	fc, _, clk, l := acquireTest(t, 1)
	for i := 1; i <= 5; i++ {
		// The watchdog sets its next timer after it has published the new
		// deadline: wait for the timer, not just for the deadline.
		var ds []time.Duration
		deadline := time.Now().Add(10 * time.Second)
		for ds = clk.Pending(); len(ds) != 1 || ds[0] < testTTL*9/30 || ds[0] > testTTL*11/30; ds = clk.Pending() {
			if time.Now().After(deadline) {
				t.Fatalf("renewal %d: timers %v, want one of about TTL/3", i, ds)
			}
			time.Sleep(time.Millisecond)
		}
		clk.Advance(ds[0])
		eventually(t, func() bool { return len(fc.requests(path("/v1/locks/renew"))) == i }, "renewal %d", i)
		want := clk.Now().Add(testTTL * 99 / 100)
		eventually(t, func() bool { return l.Deadline().Equal(want) }, "deadline to move after renewal %d", i)
	}
	if isClosed(l.Lost()) || l.Context().Err() != nil || l.Err() != nil {
		t.Fatal("renewed lease lost")
	}
	for _, r := range fc.requests(path("/v1/locks/renew")) {
		if r.str("lease_id") != l.LeaseID() || r.str("name") != "a" {
			t.Fatalf("renew %+v", r)
		}
	}
}

func TestWatchdogRetriesRenewalOnAnotherNode(t *testing.T) {
	fc, _, clk, l := acquireTest(t, 2)
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if n.id == "n1" && req.Path == "/v1/locks/renew" {
			dropConnection(w)
			return true
		}
		return false
	})
	ds := clk.WaitPending(t, 1)
	clk.Advance(ds[0])
	want := clk.Now().Add(testTTL * 99 / 100)
	eventually(t, func() bool { return l.Deadline().Equal(want) }, "renewal through n2")
	var nodes []string
	for _, r := range fc.requests(path("/v1/locks/renew")) {
		nodes = append(nodes, r.Node)
	}
	if len(nodes) != 2 || nodes[0] != "n1" || nodes[1] != "n2" {
		t.Fatalf("renewals went to %v, want n1 then n2", nodes)
	}
}

func TestWatchdogNotHolderLosesLease(t *testing.T) {
	fc, _, clk, l := acquireTest(t, 1)
	fc.drop("a") // the server let the lease go
	clk.Advance(clk.WaitPending(t, 1)[0])
	waitClosed(t, l.Lost(), "Lost")
	if !errors.Is(l.Err(), ErrLeaseLost) || !errors.Is(l.Err(), ErrNotHolder) {
		t.Fatalf("Err() = %v", l.Err())
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("context cause %v", cause)
	}
	waitClosed(t, l.done, "watchdog to exit")
	if err := l.Release(context.Background()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release of a lost lease = %v", err)
	}
	if n := len(fc.requests(path("/v1/locks/release"))); n != 0 {
		t.Fatalf("%d releases of a lease the server said we do not hold", n)
	}
}

func TestWatchdogDeadlineLosesLease(t *testing.T) {
	fc, _, clk, l := acquireTest(t, 1)
	deadline := l.Deadline()
	// Renewals never come back (a partition, a hung leader).
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path != "/v1/locks/renew" {
			return false
		}
		select {
		case <-r.Context().Done():
		case <-fc.closing:
		}
		return true
	})
	clk.Advance(clk.WaitPending(t, 1)[0])
	eventually(t, func() bool { return len(fc.requests(path("/v1/locks/renew"))) == 1 }, "renewal")
	ds := clk.WaitPending(t, 1) // the deadline
	if got := clk.Now().Add(ds[0]); !got.Equal(deadline) {
		t.Fatalf("watchdog wakes at %v, deadline is %v", got, deadline)
	}
	clk.Advance(ds[0] - time.Millisecond)
	if isClosed(l.Lost()) || l.Context().Err() != nil {
		t.Fatal("lease lost before its deadline")
	}
	clk.Advance(time.Millisecond)
	waitClosed(t, l.Lost(), "Lost at the deadline")
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("Err() = %v", l.Err())
	}
	<-l.Context().Done()
	waitClosed(t, l.done, "watchdog to exit")
}

func TestReleaseStopsWatchdog(t *testing.T) {
	before := goleak.IgnoreCurrent()
	fc := newFakeCluster(1)
	clk := newFakeClock()
	c, err := New(fc.Endpoints(), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(context.Background(), "a", AcquireOptions{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitPending(t, 1)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !isClosed(l.done) {
		t.Fatal("watchdog still running after Release")
	}
	if ds := clk.Pending(); len(ds) != 0 {
		t.Fatalf("timers left: %v", ds)
	}
	if _, held := fc.holder("a"); held {
		t.Fatal("lock still held after Release")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrReleased) {
		t.Fatalf("context cause %v", cause)
	}
	if isClosed(l.Lost()) {
		t.Fatal("Lost closed by Release")
	}
	// Nothing happens any more, however time goes on.
	clk.Advance(time.Hour)
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("second Release = %v", err)
	}
	if n := len(fc.requests(path("/v1/locks/renew"))); n != 0 {
		t.Fatalf("%d renewals after Release", n)
	}
	c.Close()
	fc.Close()
	goleak.VerifyNone(t, before)
}

func TestReleaseDuringRenewal(t *testing.T) {
	fc, _, clk, l := acquireTest(t, 1)
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path != "/v1/locks/renew" {
			return false
		}
		select { // hangs until the client gives up
		case <-r.Context().Done():
		case <-fc.closing:
		}
		return true
	})
	clk.Advance(clk.WaitPending(t, 1)[0])
	eventually(t, func() bool { return len(fc.requests(path("/v1/locks/renew"))) == 1 }, "renewal")
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !isClosed(l.done) || isClosed(l.Lost()) {
		t.Fatal("watchdog running or lease lost after Release")
	}
}

func TestDetach(t *testing.T) {
	fc, c, clk, l := acquireTest(t, 1)
	clk.WaitPending(t, 1)
	l.Detach()
	if !isClosed(l.done) || len(clk.Pending()) != 0 {
		t.Fatal("watchdog running after Detach")
	}
	if !errors.Is(context.Cause(l.Context()), ErrDetached) {
		t.Fatal("context not cancelled by Detach")
	}
	if _, held := fc.holder("a"); !held {
		t.Fatal("Detach released the lock")
	}
	// The lock can still be released by its id.
	if err := c.Release(context.Background(), "a", l.LeaseID()); err != nil {
		t.Fatal(err)
	}
}

func TestWithLock(t *testing.T) {
	fc := startFake(t, 1)
	c, _ := newTestClient(t, fc.Endpoints())
	var got uint64
	err := WithLock(context.Background(), c, "a", AcquireOptions{TTL: testTTL}, func(ctx context.Context, token uint64) error {
		h, held := fc.holder("a")
		if !held || h.token != token || ctx.Err() != nil {
			t.Errorf("fn runs without the lock: held %v token %d/%d", held, h.token, token)
		}
		got = token
		return nil
	})
	if err != nil || got == 0 {
		t.Fatalf("WithLock = %v, token %d", err, got)
	}
	if _, held := fc.holder("a"); held {
		t.Fatal("lock held after WithLock")
	}

	fnErr := errors.New("charge failed")
	err = WithLock(context.Background(), c, "a", AcquireOptions{TTL: testTTL}, func(context.Context, uint64) error { return fnErr })
	if !errors.Is(err, fnErr) {
		t.Fatalf("WithLock = %v, want fn's error", err)
	}
	if _, held := fc.holder("a"); held {
		t.Fatal("lock held after WithLock failed")
	}
}

func TestWithLockCancelsWorkWhenLeaseLost(t *testing.T) {
	fc := startFake(t, 1)
	c, clk := newTestClient(t, fc.Endpoints())
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- WithLock(context.Background(), c, "a", AcquireOptions{TTL: testTTL}, func(ctx context.Context, _ uint64) error {
			close(running)
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), ErrLeaseLost) {
				t.Errorf("work cancelled by %v", context.Cause(ctx))
			}
			return ctx.Err()
		})
	}()
	waitClosed(t, running, "work to start")
	fc.drop("a")
	clk.Advance(clk.WaitPending(t, 1)[0])
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("WithLock did not return after the lease was lost")
	}
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("WithLock = %v, want lease lost", err)
	}
}
