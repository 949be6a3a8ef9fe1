package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// Tests against a real three-node cluster on loopback, real clocks.

func newClusterClient(t *testing.T, endpoints []string) *Client {
	t.Helper()
	c, err := New(endpoints, WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdFor watches lease for d and fails the test if it is lost; it returns
// how many times the deadline moved (renewals).
func holdFor(t *testing.T, lease *Lease, d time.Duration) int {
	t.Helper()
	moves, last := 0, lease.Deadline()
	end := time.After(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-lease.Lost():
			t.Fatalf("lease lost: %v", lease.Err())
		case <-end:
			return moves
		case <-tick.C:
			if dl := lease.Deadline(); dl.After(last) {
				moves, last = moves+1, dl
			}
		}
	}
}

func TestClusterWatchdogKeepsLeaseAlive(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 30*time.Second)
	const ttl = time.Second
	lease, err := c.Acquire(ctx, "orders/89041", AcquireOptions{TTL: ttl, Owner: "worker-a"})
	if err != nil {
		t.Fatal(err)
	}
	if moves := holdFor(t, lease, 5*ttl); moves < 9 {
		t.Fatalf("deadline moved %d times in 5 TTLs, want renewals about every TTL/3", moves)
	}
	// Long past its TTL, the lock is still ours, and nobody else gets it.
	info, err := c.Get(ctx, "orders/89041", false)
	if err != nil || !info.Held || info.Token != lease.Token() || info.Owner != "worker-a" {
		t.Fatalf("Get = %+v, %v", info, err)
	}
	other := newClusterClient(t, cl.Endpoints())
	if _, err := other.TryAcquire(ctx, "orders/89041", AcquireOptions{TTL: ttl}); !errors.Is(err, ErrHeld) {
		t.Fatalf("second client: %v, want held", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := other.TryAcquire(ctx, "orders/89041", AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= lease.Token() {
		t.Fatalf("next token %d not above %d", l2.Token(), lease.Token())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClusterLeaseSurvivesLeaderKill(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	const ttl = 2 * time.Second
	lease, err := c.Acquire(ctx, "a", AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	holdFor(t, lease, ttl/2)

	old := cl.Leader()
	old.Kill()
	killed := time.Now()
	newLeader := cl.WaitForNewLeader(old)
	t.Logf("leader %s killed, %s leads after %v", old.ID, newLeader.ID, time.Since(killed))

	// The lease keeps renewing through the new leader, past the TTL it
	// had when the leader died.
	if moves := holdFor(t, lease, 3*ttl); moves < 4 {
		t.Fatalf("deadline moved %d times in 3 TTLs after the failover", moves)
	}
	if !lease.Deadline().After(killed.Add(2 * ttl)) {
		t.Fatal("lease not renewed after the leader was killed")
	}
	if got := c.Leader(); got != newLeader.ID {
		t.Fatalf("client thinks %q leads, want %q", got, newLeader.ID)
	}
	info, err := c.Get(ctx, "a", false)
	if err != nil || !info.Held || info.Token != lease.Token() {
		t.Fatalf("Get = %+v, %v", info, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClusterAcquireRetrySameLeaseIDSameToken(t *testing.T) {
	cl := testenv.Start(t, 3)
	// Through a follower, so the retry is also forwarded.
	c := newClusterClient(t, []string{cl.Followers()[0].URL()})
	ctx := testenv.Context(t, 30*time.Second)
	id := NewLeaseID()
	opts := AcquireOptions{TTL: 5 * time.Second, LeaseID: id, Owner: "worker-a"}
	first, err := c.TryAcquire(ctx, "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	first.Detach() // as if its answer had been lost
	again, err := c.TryAcquire(ctx, "a", opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() != first.Token() || again.LeaseID() != id {
		t.Fatalf("retry got token %d, first %d", again.Token(), first.Token())
	}
	// Another lease id is refused, naming the holder.
	_, err = c.TryAcquire(ctx, "a", AcquireOptions{TTL: 5 * time.Second})
	var held *HeldError
	if !errors.As(err, &held) || held.Token != first.Token() || held.Owner != "worker-a" {
		t.Fatalf("other lease: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// blackhole is a proxy to one node that can be made to stop answering.
type blackhole struct {
	srv    *httptest.Server
	cut    atomic.Bool
	closed chan struct{}
}

func newBlackhole(t *testing.T, target string) *blackhole {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{closed: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(u)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.cut.Load() {
			select {
			case <-r.Context().Done():
			case <-b.closed:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(b.closed)
		b.srv.Close()
	})
	return b
}

func TestClusterPartitionedClientLosesLeaseByDeadline(t *testing.T) {
	cl := testenv.Start(t, 3)
	leader := cl.Leader()
	bh := newBlackhole(t, leader.URL())
	// The client reaches the cluster only through the proxy.
	c := newClusterClient(t, []string{bh.srv.URL})
	ctx := testenv.Context(t, 30*time.Second)
	const ttl = time.Second
	lease, err := c.Acquire(ctx, "a", AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	holdFor(t, lease, ttl/2)

	bh.cut.Store(true)
	other := newClusterClient(t, cl.Endpoints())
	l2, err := other.Acquire(ctx, "a", AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// The partitioned holder stopped trusting its lease before anyone
	// else could get the lock.
	if !isClosed(lease.Lost()) {
		t.Fatal("another client got the lock while the partitioned one still trusted its lease")
	}
	if !errors.Is(lease.Err(), ErrLeaseLost) {
		t.Fatalf("Err() = %v", lease.Err())
	}
	if l2.Token() <= lease.Token() {
		t.Fatalf("new token %d not above %d", l2.Token(), lease.Token())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := lease.Release(rctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release = %v", err)
	}
}

func TestClusterLostNoLaterThanDeadline(t *testing.T) {
	cl := testenv.Start(t, 3)
	bh := newBlackhole(t, cl.Leader().URL())
	c := newClusterClient(t, []string{bh.srv.URL})
	ctx := testenv.Context(t, 30*time.Second)
	lease, err := c.Acquire(ctx, "a", AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bh.cut.Store(true)
	deadline := lease.Deadline()
	select {
	case <-lease.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("lease never lost")
	}
	lostAt := time.Now()
	// The deadline only moves forward with successful renewals; the one in
	// flight when the cut came may have succeeded.
	if final := lease.Deadline(); final.After(deadline) {
		deadline = final
	}
	// Slack for scheduling on a loaded test machine only.
	if late := lostAt.Sub(deadline); late > 300*time.Millisecond {
		t.Fatalf("Lost closed %v after the deadline", late)
	}
	if lostAt.Before(deadline) && !errors.Is(lease.Err(), ErrNotHolder) {
		t.Fatalf("lost %v before the deadline: %v", deadline.Sub(lostAt), lease.Err())
	}
	lease.Detach()
}

// Many goroutines sharing one client on a few contended locks: their calls
// go to the leader in batches (the node counts POST /v1/batch), and a lock
// still has one holder at a time, each grant with a token above the
// lock's last one.
func TestClusterCoalescedCallsKeepLocksExclusive(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	const workers, rounds, locks = 32, 25, 4
	var holders [locks]atomic.Int32
	var lastToken [locks]atomic.Uint64
	var granted atomic.Int64
	errc := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range rounds {
				k := (w + i) % locks
				name := "coalesced/" + string(rune('a'+k))
				l, err := c.TryAcquire(ctx, name, AcquireOptions{TTL: 10 * time.Second})
				if errors.Is(err, ErrHeld) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				l.Detach()
				if n := holders[k].Add(1); n != 1 {
					errc <- errors.New(name + ": two holders at once")
					return
				}
				if prev := lastToken[k].Swap(l.Token()); prev >= l.Token() {
					errc <- errors.New(name + ": fencing token did not rise")
					return
				}
				granted.Add(1)
				holders[k].Add(-1)
				if err := l.Release(ctx); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range workers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if granted.Load() == 0 {
		t.Fatal("no acquire succeeded")
	}
	resp, err := http.Get(cl.Leader().URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !regexp.MustCompile(`raftlock_http_requests_total\{[^}]*route="/v1/batch"[^}]*\} [1-9]`).Match(body) {
		t.Fatalf("the leader counted no batch: %d workers on one client never queued (metrics: %s)", workers,
			regexp.MustCompile(`(?m)^raftlock_http_requests_total.*$`).FindAll(body, -1))
	}
}
