package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// realClient is a client on the real clock with short backoffs, for tests
// whose retries should not need the fake clock advanced.
func realClient(t *testing.T, endpoints []string) *Client {
	t.Helper()
	c, err := New(endpoints, WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sessionTest makes a session with TTL testTTL holding n locks l0..l(n-1) on
// a fake cluster, with a fake clock.
func sessionTest(t *testing.T, n int) (*fakeCluster, *fakeClock, *Session, []*Lease) {
	t.Helper()
	fc := startFake(t, 1)
	c, clk := newTestClient(t, fc.Endpoints())
	ctx := context.Background()
	sess, err := NewSession(ctx, c, SessionOptions{Owner: "svc", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	var leases []*Lease
	for i := range n {
		l, err := sess.TryAcquire(ctx, "l"+string(rune('0'+i)), AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	return fc, clk, sess, leases
}

func TestSessionWatchdogRenewsOnlyTheSession(t *testing.T) {
	fc, clk, sess, leases := sessionTest(t, 5)
	for _, r := range fc.requests(path("/v1/locks/acquire")) {
		if r.str("session_id") != sess.ID() || r.Body["ttl_ms"] != nil || r.str("owner") != "svc" {
			t.Fatalf("acquire %+v: want the session's id and owner, no ttl_ms", r.Body)
		}
	}
	for i := 1; i <= 4; i++ {
		ds := clk.WaitPending(t, 1)
		if len(ds) != 1 {
			t.Fatalf("renewal %d: timers %v, want the session's one", i, ds)
		}
		clk.Advance(ds[0])
		eventually(t, func() bool { return len(fc.requests(path("/v1/sessions/renew"))) == i }, "session renewal %d", i)
		want := clk.Now().Add(testTTL * 99 / 100)
		eventually(t, func() bool { return sess.Deadline().Equal(want) }, "deadline to move after renewal %d", i)
	}
	if n := len(fc.requests(path("/v1/locks/renew"))); n != 0 {
		t.Fatalf("%d lock renewals: a session's leases must not renew themselves", n)
	}
	for _, l := range leases {
		if isClosed(l.Done()) || l.Err() != nil || !l.Deadline().Equal(sess.Deadline()) || l.Session() != sess || l.TTL() != testTTL {
			t.Fatalf("lease %s: done %v err %v deadline %v (session %v)", l.Name(), isClosed(l.Done()), l.Err(), l.Deadline(), sess.Deadline())
		}
		if !isClosed(l.done) {
			t.Fatal("a session's lease has a watchdog")
		}
	}
}

func TestSessionNoSessionLosesEveryLease(t *testing.T) {
	fc, clk, sess, leases := sessionTest(t, 3)
	fc.endSession(sess.ID()) // it expired on the cluster
	clk.Advance(clk.WaitPending(t, 1)[0])
	waitClosed(t, sess.Done(), "session Done")
	waitClosed(t, sess.Lost(), "session Lost") // closes just after Done
	if !isClosed(sess.Lost()) || !errors.Is(sess.Err(), ErrSessionLost) || !errors.Is(sess.Err(), ErrNoSession) {
		t.Fatalf("session Err() = %v", sess.Err())
	}
	for _, l := range leases {
		waitClosed(t, l.Done(), "lease Done")
		// Lost closes just after Done (the cause is set first): wait for it
		// rather than read it the instant Done closes.
		waitClosed(t, l.Lost(), "lease Lost")
		if !isClosed(l.Lost()) || !errors.Is(l.Err(), ErrLeaseLost) || !errors.Is(l.Err(), ErrSessionLost) {
			t.Fatalf("lease Err() = %v", l.Err())
		}
		if err := l.Release(context.Background()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Release of a lost lease = %v", err)
		}
	}
	if n := len(fc.requests(path("/v1/locks/release"))); n != 0 {
		t.Fatalf("%d releases of leases the server said are gone with their session", n)
	}
	if _, err := sess.TryAcquire(context.Background(), "x", AcquireOptions{}); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("acquire through a lost session = %v", err)
	}
	if err := sess.Close(context.Background()); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("Close of a lost session = %v", err)
	}
	if n := len(fc.requests(path("/v1/sessions/close"))); n != 0 {
		t.Fatalf("%d closes of a session the server said is gone", n)
	}
}

func TestSessionDeadlineLosesEveryLease(t *testing.T) {
	fc, clk, sess, leases := sessionTest(t, 2)
	deadline := sess.Deadline()
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path != "/v1/sessions/renew" {
			return false
		}
		select { // renewals never come back
		case <-r.Context().Done():
		case <-fc.closing:
		}
		return true
	})
	clk.Advance(clk.WaitPending(t, 1)[0])
	eventually(t, func() bool { return len(fc.requests(path("/v1/sessions/renew"))) == 1 }, "renewal")
	ds := clk.WaitPending(t, 1)
	if got := clk.Now().Add(ds[0]); !got.Equal(deadline) {
		t.Fatalf("watchdog wakes at %v, deadline is %v", got, deadline)
	}
	clk.Advance(ds[0] - time.Millisecond)
	if isClosed(sess.Done()) || isClosed(leases[0].Done()) {
		t.Fatal("lost before the deadline")
	}
	clk.Advance(time.Millisecond)
	waitClosed(t, sess.Lost(), "session Lost at the deadline")
	for _, l := range leases {
		waitClosed(t, l.Lost(), "lease Lost with its session")
		if !errors.Is(context.Cause(l.Context()), ErrSessionLost) || errors.Is(l.Err(), ErrNoSession) {
			t.Fatalf("lease cause %v", context.Cause(l.Context()))
		}
	}
}

func TestSessionCloseReleasesEveryLease(t *testing.T) {
	fc, clk, sess, leases := sessionTest(t, 3)
	clk.WaitPending(t, 1)
	if err := sess.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(clk.Pending()) != 0 || !isClosed(sess.ka.done) {
		t.Fatal("session watchdog running after Close")
	}
	if !errors.Is(context.Cause(sess.Context()), ErrSessionClosed) || isClosed(sess.Lost()) {
		t.Fatalf("session cause %v, lost %v", context.Cause(sess.Context()), isClosed(sess.Lost()))
	}
	for _, l := range leases {
		if !isClosed(l.Done()) || isClosed(l.Lost()) {
			t.Fatal("lease not ended by Close, or lost")
		}
		if c := context.Cause(l.Context()); !errors.Is(c, ErrReleased) || !errors.Is(c, ErrSessionClosed) {
			t.Fatalf("lease cause %v", c)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("Release after Close = %v", err)
		}
		if _, held := fc.holder(l.Name()); held {
			t.Fatalf("%s still held after Close", l.Name())
		}
	}
	if n := len(fc.requests(path("/v1/locks/release"))); n != 0 {
		t.Fatalf("%d lock releases: Close releases them all", n)
	}
	if err := sess.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if n := len(fc.requests(path("/v1/sessions/close"))); n != 1 {
		t.Fatalf("%d closes sent, want 1", n)
	}
	if _, err := sess.TryAcquire(context.Background(), "x", AcquireOptions{}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("acquire through a closed session = %v", err)
	}
}

func TestSessionLeaseReleasedAlone(t *testing.T) {
	fc, _, sess, leases := sessionTest(t, 2)
	if err := leases[0].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := fc.requests(path("/v1/locks/release"))
	if len(rs) != 1 || rs[0].str("lease_id") != leases[0].LeaseID() {
		t.Fatalf("releases %+v", rs)
	}
	if _, held := fc.holder("l1"); !held || isClosed(leases[1].Done()) || isClosed(sess.Done()) {
		t.Fatal("releasing one lease ended others")
	}
	if err := sess.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, leases[1].Done(), "the other lease to end with Close")
}

// A close whose first attempt was applied but answered 504 is resent; the
// no_session that follows means it is done.
func TestSessionCloseAfterUnknownOutcome(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := NewSession(ctx, c, SessionOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l, err := sess.TryAcquire(ctx, "a", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := true
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path == "/v1/sessions/close" && first {
			first = false
			fc.endSession(req.str("session_id"))
			writeErr(w, http.StatusGatewayTimeout, "unknown_outcome", "leadership lost")
			return true
		}
		return false
	})
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("Close = %v, want success: the first attempt closed it", err)
	}
	if n := len(fc.requests(path("/v1/sessions/close"))); n != 2 {
		t.Fatalf("%d close attempts, want 2", n)
	}
	if !isClosed(l.Done()) || isClosed(l.Lost()) {
		t.Fatal("lease not ended by the close, or lost")
	}
	// A close that finds no session without an unknown outcome is an error.
	if _, err := c.CloseSession(ctx, sess.ID()); !errors.Is(err, ErrNoSession) {
		t.Fatalf("CloseSession of a closed session = %v, want ErrNoSession", err)
	}
}

// A create whose answer is lost is resent with the same session id: one
// session, not two.
func TestSessionCreateResentWithSameID(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	first := true
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path == "/v1/sessions" && first {
			first = false
			n.serve(httptest.NewRecorder(), r) // applied, answer lost
			dropConnection(w)
			return true
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := NewSession(ctx, c, SessionOptions{TTL: time.Minute, Owner: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	rs := fc.requests(path("/v1/sessions"))
	if len(rs) != 2 || rs[0].str("session_id") != sess.ID() || rs[1].str("session_id") != sess.ID() {
		t.Fatalf("creates %+v, want two with the session's id", rs)
	}
	fc.mu.Lock()
	n := len(fc.sessions)
	fc.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d sessions on the cluster, want 1", n)
	}
}

func TestSessionErrorMappings(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := NewSession(ctx, c, SessionOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path == "/v1/locks/acquire" && req.str("name") == "full" {
			writeErr(w, http.StatusConflict, "session_full", "the session holds 4096 leases")
			return true
		}
		return false
	})
	if _, err := sess.TryAcquire(ctx, "full", AcquireOptions{}); !errors.Is(err, ErrSessionFull) {
		t.Fatalf("session_full answered %v", err)
	}
	if _, err := sess.TryAcquire(ctx, "a", AcquireOptions{TTL: time.Second}); err == nil {
		t.Fatal("a session's lease took a TTL of its own")
	}
	if _, err := sess.TryAcquire(ctx, "a", AcquireOptions{LockDelay: time.Second}); err == nil {
		t.Fatal("a session's lease took a lock delay of its own")
	}
	// The cluster forgot the session before the watchdog noticed.
	fc.endSession(sess.ID())
	if _, err := sess.TryAcquire(ctx, "b", AcquireOptions{}); !errors.Is(err, ErrNoSession) {
		t.Fatalf("acquire with an ended session = %v, want ErrNoSession", err)
	}
	if _, err := c.Session(ctx, sess.ID()); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Session of an ended session = %v", err)
	}
	if _, err := c.RenewSession(ctx, sess.ID(), 0); !errors.Is(err, ErrNoSession) {
		t.Fatalf("RenewSession of an ended session = %v", err)
	}
	if _, err := NewSession(ctx, c, SessionOptions{ID: "short"}); err == nil {
		t.Fatal("a bad session id was sent")
	}
}

func TestSessionRead(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := NewSession(ctx, c, SessionOptions{TTL: time.Minute, Owner: "svc", LockDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	l, err := sess.TryAcquire(ctx, "a", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sess.TrySemaphore(ctx, "pool", 2, SemaphoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Session(ctx, sess.ID())
	if err != nil {
		t.Fatal(err)
	}
	want := []SessionLease{{Kind: "lock", Name: "a", Token: l.Token()}, {Kind: "semaphore", Name: "pool", Token: p.Token(), Slot: 0}}
	if info.Owner != "svc" || info.TTL != time.Minute || info.LockDelay != 2*time.Second || info.Remaining != time.Minute || !slices.Equal(info.Leases, want) {
		t.Fatalf("Session = %+v", info)
	}
	if sess.LockDelay() != 2*time.Second || sess.Owner() != "svc" {
		t.Fatalf("session lock delay %v owner %q", sess.LockDelay(), sess.Owner())
	}
}

// A create that may have been applied when the caller's context ends is
// closed, best effort, so that the session does not hold anything until
// its TTL; the error says the outcome is unknown.
func TestSessionCreateUnknownOutcomeClosesIt(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path == "/v1/sessions" {
			n.serve(httptest.NewRecorder(), r) // applied, every answer lost
			dropConnection(w)
			return true
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := NewSession(ctx, c, SessionOptions{TTL: time.Minute})
	if !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("NewSession = %v, want an unknown outcome", err)
	}
	closes := fc.requests(path("/v1/sessions/close"))
	creates := fc.requests(path("/v1/sessions"))
	if len(closes) != 1 || len(creates) == 0 || closes[0].str("session_id") != creates[0].str("session_id") {
		t.Fatalf("closes %+v after creates %+v, want the created session closed", closes, creates)
	}
	fc.mu.Lock()
	n := len(fc.sessions)
	fc.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d sessions left on the cluster", n)
	}
}
