package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// On a real three-node cluster: sessions, semaphores, shared locks.

// countingProxy forwards to one node, counts requests by path, and can be
// cut: requests then hang until the client gives up.
type countingProxy struct {
	srv *httptest.Server
	cut atomic.Bool

	mu     sync.Mutex
	counts map[string]int
}

func newCountingProxy(t *testing.T, target string) *countingProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{counts: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	closed := make(chan struct{})
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/cluster" {
			// Keep the client on this proxy: without the cluster's
			// addresses it cannot follow a new leader around the counts
			// (nor around the cut), and the node behind the proxy relays
			// its writes to whichever node leads.
			http.NotFound(w, r)
			return
		}
		p.mu.Lock()
		p.counts[r.URL.Path]++
		p.mu.Unlock()
		if p.cut.Load() {
			select {
			case <-r.Context().Done():
			case <-closed:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(closed)
		p.srv.Close()
	})
	return p
}

func (p *countingProxy) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[path]
}

// A session with TTL 2s holding 200 locks keeps them all for 6s by renewing
// the session alone; when its renewals stop, every lease is lost locally
// and the cluster frees all 200 in one entry.
func TestClusterSessionKeepsManyLocks(t *testing.T) {
	cl := testenv.Start(t, 3)
	px := newCountingProxy(t, cl.Leader().URL())
	c := newClusterClient(t, []string{px.srv.URL})
	other := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 120*time.Second)
	const ttl, n = 2 * time.Second, 200
	sess, err := NewSession(ctx, c, SessionOptions{Owner: "ingest-7", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// Ten at a time: the session, not the test's patience, is under test.
	leases := make([]*Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 10 {
				leases[i], errs[i] = sess.TryAcquire(ctx, fmt.Sprintf("s/%03d", i), AcquireOptions{})
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	renewsBefore := px.count("/v1/sessions/renew")
	end := time.After(6 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-sess.Done():
			t.Fatalf("session lost: %v", sess.Err())
		case <-end:
			waiting = false
		}
	}
	if got := px.count("/v1/sessions/renew") - renewsBefore; got < 6 {
		t.Fatalf("%d session renewals in 6s, want about one every TTL/3", got)
	}
	if got := px.count("/v1/locks/renew"); got != 0 {
		t.Fatalf("%d lock renewals: the session's leases must not renew themselves", got)
	}
	list, err := other.List(ctx, "s/", 1000)
	if err != nil || len(list.Locks) != n {
		t.Fatalf("after 6s: %d locks held (%v), want %d", len(list.Locks), err, n)
	}
	for i, l := range list.Locks {
		if l.Token != leases[i].Token() || l.Owner != "ingest-7" {
			t.Fatalf("lock %s: %+v, want token %d", l.Name, l, leases[i].Token())
		}
		if isClosed(leases[i].Done()) {
			t.Fatalf("lease %s ended", l.Name)
		}
	}

	px.cut.Store(true) // renewals stop
	cutAt := time.Now()
	waitClosed(t, sess.Lost(), "session lost once renewals stop")
	for _, l := range leases {
		waitClosed(t, l.Done(), "every lease to end with its session")
		if !errors.Is(l.Err(), ErrSessionLost) {
			t.Fatalf("lease %s: %v", l.Name(), l.Err())
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the cluster to free the session's locks", func() bool {
		list, err := other.List(ctx, "s/", 1000)
		return err == nil && len(list.Locks) == 0
	})
	t.Logf("all %d locks free %v after renewals stopped (TTL %v)", n, time.Since(cutAt), ttl)
	// One expiry entry ended them all.
	var freedAt uint64
	for i := range n {
		info, err := other.Get(ctx, fmt.Sprintf("s/%03d", i), false)
		if err != nil || info.Held {
			t.Fatalf("s/%03d: %+v, %v", i, info, err)
		}
		if i == 0 {
			freedAt = info.Index
		}
		if info.Index != freedAt || info.Index == 0 {
			t.Fatalf("s/%03d freed at index %d, s/000 at %d: want one entry", i, info.Index, freedAt)
		}
	}
	if _, err := other.Session(ctx, sess.ID()); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Session after expiry = %v, want ErrNoSession", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	sess.Close(cctx)
}

// Close frees a session's locks at once, and the session's read shows them
// until then.
func TestClusterSessionCloseFreesAtOnce(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	sess, err := NewSession(ctx, c, SessionOptions{Owner: "svc", TTL: 30 * time.Second, LockDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var tokens []uint64
	for i := range 20 {
		l, err := sess.TryAcquire(ctx, fmt.Sprintf("c/%02d", i), AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, l.Token())
	}
	p, err := sess.TrySemaphore(ctx, "c-pool", 2, SemaphoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Session(ctx, sess.ID())
	if err != nil || len(info.Leases) != 21 || info.Owner != "svc" || info.LockDelay != 5*time.Second {
		t.Fatalf("Session = %+v, %v", info, err)
	}
	if l := info.Leases[20]; l.Kind != "semaphore" || l.Name != "c-pool" || l.Token != p.Token() || l.Slot != p.Slot() {
		t.Fatalf("the permit in the session's read: %+v", l)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Closed, not expired: no lock-delay, every lock free at once.
	list, err := c.List(ctx, "c/", 1000)
	if err != nil || len(list.Locks) != 0 {
		t.Fatalf("after Close: %d locks held, %v", len(list.Locks), err)
	}
	l, err := c.TryAcquire(ctx, "c/00", AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("acquire right after Close: %v", err)
	}
	if l.Token() <= tokens[0] {
		t.Fatalf("token %d not above the session's %d", l.Token(), tokens[0])
	}
	l.Release(ctx)
	if s, err := c.Semaphore(ctx, "c-pool"); err != nil || len(s.Holders) != 0 {
		t.Fatalf("semaphore after Close: %+v, %v", s, err)
	}
}

// Limit 3: slots 0, 1, 2; a fourth is full, then gets the freed slot with
// a larger token; a holder that stops renewing frees its permit at its TTL.
func TestClusterSemaphoreSlots(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	var permits []*Permit
	for i := range 3 {
		p, err := c.TrySemaphore(ctx, "pool", 3, SemaphoreOptions{TTL: 2 * time.Second, Owner: fmt.Sprintf("w%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if p.Slot() != i || p.Limit() != 3 {
			t.Fatalf("permit %d: slot %d limit %d", i, p.Slot(), p.Limit())
		}
		permits = append(permits, p)
	}
	_, err := c.TrySemaphore(ctx, "pool", 3, SemaphoreOptions{TTL: 2 * time.Second})
	var full *FullError
	if !errors.As(err, &full) || len(full.Holders) != 3 {
		t.Fatalf("fourth = %v, want full with 3 holders", err)
	}
	if _, err := c.TrySemaphore(ctx, "pool", 4, SemaphoreOptions{TTL: 2 * time.Second}); !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("another limit = %v, want limit_mismatch", err)
	}
	if err := permits[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p4, err := c.TrySemaphore(ctx, "pool", 3, SemaphoreOptions{TTL: 2 * time.Second, Owner: "w3"})
	if err != nil {
		t.Fatal(err)
	}
	if p4.Slot() != 1 || p4.Token() <= permits[1].Token() {
		t.Fatalf("freed slot: got slot %d token %d, want slot 1 above %d", p4.Slot(), p4.Token(), permits[1].Token())
	}
	// Slot 0's holder dies without releasing; a waiter gets slot 0 at its TTL.
	permits[0].Detach()
	p5, err := c.AcquireSemaphore(ctx, "pool", 3, SemaphoreOptions{TTL: 2 * time.Second, Owner: "w4"})
	if err != nil {
		t.Fatal(err)
	}
	if p5.Slot() != 0 || p5.Token() <= permits[0].Token() {
		t.Fatalf("expired slot: got slot %d token %d, want slot 0 above %d", p5.Slot(), p5.Token(), permits[0].Token())
	}
	info, err := c.Semaphore(ctx, "pool")
	if err != nil || info.Limit != 3 || len(info.Holders) != 3 {
		t.Fatalf("Semaphore = %+v, %v", info, err)
	}
	for _, p := range []*Permit{p5, p4, permits[2]} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Two shared readers hold together; a writer waits for both and gets a
// larger token; a reader arriving while the writer waits does not jump it.
func TestClusterSharedLock(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	r1, err := c.TryAcquire(ctx, "schema", AcquireOptions{TTL: 5 * time.Second, Shared: true, Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.TryAcquire(ctx, "schema", AcquireOptions{TTL: 5 * time.Second, Shared: true, Owner: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	if !r1.Shared() || !r2.Shared() || r2.Token() <= r1.Token() {
		t.Fatalf("readers: tokens %d, %d", r1.Token(), r2.Token())
	}
	info, err := c.Get(ctx, "schema", false)
	if err != nil || !info.Shared || len(info.Holders) != 2 || info.Owner != "r1" || info.Token != r1.Token() || info.Holders[1].Token != r2.Token() {
		t.Fatalf("Get of the shared lock = %+v, %v", info, err)
	}
	_, err = c.TryAcquire(ctx, "schema", AcquireOptions{TTL: 5 * time.Second})
	var held *HeldError
	if !errors.As(err, &held) || len(held.Holders) != 2 {
		t.Fatalf("exclusive TryAcquire = %v, want held by both readers", err)
	}
	type result struct {
		l   *Lease
		err error
	}
	writer := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "schema", AcquireOptions{TTL: 5 * time.Second, Owner: "w"})
		writer <- result{l, err}
	}()
	testenv.WaitFor(t, 10*time.Second, "the writer to wait", func() bool {
		// Waiters are reported by reads answered by the leader.
		var j struct{ Waiters int }
		_, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/locks/schema", leader: true, idempotent: true}, &j)
		return err == nil && j.Waiters == 1
	})
	if _, err := c.TryAcquire(ctx, "schema", AcquireOptions{TTL: 5 * time.Second, Shared: true}); !errors.Is(err, ErrHeld) {
		t.Fatalf("a reader jumped the waiting writer: %v", err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The release's entry would have granted the writer: a read after it
	// shows whether it did.
	if info, err := c.Get(ctx, "schema", false); err != nil || info.Owner != "r2" || info.Token != r2.Token() || len(info.Holders) != 1 {
		t.Fatalf("after r1 left: %+v, %v; want r2 alone holding", info, err)
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-writer
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Shared() || r.l.Token() <= r2.Token() {
		t.Fatalf("writer token %d, readers' %d and %d", r.l.Token(), r1.Token(), r2.Token())
	}
	r.l.Release(ctx)
}
