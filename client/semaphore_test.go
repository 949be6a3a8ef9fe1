package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestSemaphoreSlotsFullAndFreedSlot(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var permits []*Permit
	for i := range 3 {
		p, err := c.TrySemaphore(ctx, "pool", 3, SemaphoreOptions{TTL: time.Minute, Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
		if p.Slot() != i || p.Limit() != 3 || p.Name() != "pool" || p.Owner() != "w" {
			t.Fatalf("permit %d: slot %d limit %d", i, p.Slot(), p.Limit())
		}
		permits = append(permits, p)
	}
	_, err := c.TrySemaphore(ctx, "pool", 3, SemaphoreOptions{TTL: time.Minute})
	var full *FullError
	if !errors.Is(err, ErrFull) || !errors.As(err, &full) || full.Name != "pool" || len(full.Holders) != 3 {
		t.Fatalf("fourth TrySemaphore = %v, want a FullError with 3 holders", err)
	}
	for i, h := range full.Holders {
		if h.Slot != i || h.Token != permits[i].Token() || h.Owner != "w" {
			t.Fatalf("holder %d = %+v", i, h)
		}
	}
	if err := permits[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := c.TrySemaphore(ctx, "pool", 3, SemaphoreOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if p.Slot() != 1 || p.Token() <= permits[1].Token() {
		t.Fatalf("after release: slot %d token %d, want slot 1 and a token above %d", p.Slot(), p.Token(), permits[1].Token())
	}
	info, err := c.Semaphore(ctx, "pool")
	if err != nil || info.Limit != 3 || len(info.Holders) != 3 || info.Holders[1].Token != p.Token() {
		t.Fatalf("Semaphore = %+v, %v", info, err)
	}
}

func TestSemaphoreLimitMismatch(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc.holdPermit("pool", 3, "other", NewLeaseID())
	_, err := c.TrySemaphore(ctx, "pool", 5, SemaphoreOptions{})
	var lm *LimitMismatchError
	if !errors.Is(err, ErrLimitMismatch) || !errors.As(err, &lm) || lm.Limit != 3 || lm.Name != "pool" {
		t.Fatalf("TrySemaphore with limit 5 = %v, want limit_mismatch with limit 3", err)
	}
	for _, limit := range []int{0, -1, MaxSemaphoreLimit + 1} {
		if _, err := c.TrySemaphore(ctx, "pool", limit, SemaphoreOptions{}); err == nil {
			t.Fatalf("limit %d sent", limit)
		}
	}
	if n := len(fc.requests(path("/v1/semaphores/acquire"))); n != 1 {
		t.Fatalf("%d acquires sent, want 1", n)
	}
}

func TestSemaphoreWaitsForAFreePermit(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := NewLeaseID()
	_, token := fc.holdPermit("pool", 1, "other", other)
	got := make(chan *Permit, 1)
	go func() {
		p, err := c.AcquireSemaphore(ctx, "pool", 1, SemaphoreOptions{TTL: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	eventually(t, func() bool { return len(fc.requests(path("/v1/semaphores/acquire"))) >= 1 }, "the waiting acquire")
	fc.dropPermit("pool", other)
	p := <-got
	if p == nil {
		t.FailNow()
	}
	defer p.Release(ctx)
	if p.Slot() != 0 || p.Token() <= token {
		t.Fatalf("slot %d token %d, want slot 0 above %d", p.Slot(), p.Token(), token)
	}
	// A bounded wait on a full semaphore ends with both "full" and the deadline.
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	_, err := c.AcquireSemaphore(short, "pool", 1, SemaphoreOptions{TTL: time.Minute})
	if !errors.Is(err, ErrFull) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bounded wait = %v, want full and deadline", err)
	}
}

func TestPermitWatchdog(t *testing.T) {
	fc := startFake(t, 1)
	c, clk := newTestClient(t, fc.Endpoints())
	p, err := c.TrySemaphore(context.Background(), "pool", 2, SemaphoreOptions{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(context.Background())
	for i := 1; i <= 3; i++ {
		clk.Advance(clk.WaitPending(t, 1)[0])
		eventually(t, func() bool { return len(fc.requests(path("/v1/semaphores/renew"))) == i }, "renewal %d", i)
		want := clk.Now().Add(testTTL * 99 / 100)
		eventually(t, func() bool { return p.Deadline().Equal(want) }, "deadline after renewal %d", i)
	}
	for _, r := range fc.requests(path("/v1/semaphores/renew")) {
		if r.str("lease_id") != p.LeaseID() || r.str("name") != "pool" {
			t.Fatalf("renew %+v", r.Body)
		}
	}
	fc.dropPermit("pool", p.LeaseID()) // it expired on the cluster
	clk.Advance(clk.WaitPending(t, 1)[0])
	waitClosed(t, p.Done(), "permit Done")
	if !isClosed(p.Lost()) || !errors.Is(p.Err(), ErrLeaseLost) || !errors.Is(p.Err(), ErrNotHolder) {
		t.Fatalf("Err() = %v", p.Err())
	}
	if err := p.Release(context.Background()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release of a lost permit = %v", err)
	}
	if n := len(fc.requests(path("/v1/semaphores/release"))); n != 0 {
		t.Fatalf("%d releases of a permit the server said is not held", n)
	}
}

func TestPermitOfSessionEndsWithIt(t *testing.T) {
	fc := startFake(t, 1)
	c, clk := newTestClient(t, fc.Endpoints())
	ctx := context.Background()
	sess, err := NewSession(ctx, c, SessionOptions{TTL: testTTL, Owner: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	p, err := c.TrySemaphore(ctx, "pool", 2, SemaphoreOptions{Session: sess})
	if err != nil {
		t.Fatal(err)
	}
	rs := fc.requests(path("/v1/semaphores/acquire"))
	if len(rs) != 1 || rs[0].str("session_id") != sess.ID() || rs[0].Body["ttl_ms"] != nil || rs[0].str("owner") != "svc" {
		t.Fatalf("acquire %+v", rs)
	}
	if _, err := c.TrySemaphore(ctx, "pool", 2, SemaphoreOptions{Session: sess, TTL: time.Second}); err == nil {
		t.Fatal("a session's permit took a TTL of its own")
	}
	if ds := clk.WaitPending(t, 1); len(ds) != 1 {
		t.Fatalf("timers %v, want only the session's", ds)
	}
	fc.endSession(sess.ID())
	clk.Advance(clk.WaitPending(t, 1)[0])
	waitClosed(t, p.Done(), "permit Done with its session")
	if !errors.Is(p.Err(), ErrSessionLost) || len(fc.requests(path("/v1/semaphores/renew"))) != 0 {
		t.Fatalf("permit Err() = %v", p.Err())
	}
}

// A release whose first attempt was applied but answered 504 is resent; the
// not_holder that follows means it is done.
func TestPermitReleaseAfterUnknownOutcome(t *testing.T) {
	fc := startFake(t, 1)
	c := realClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.TrySemaphore(ctx, "pool", 1, SemaphoreOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	first := true
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path == "/v1/semaphores/release" && first {
			first = false
			fc.dropPermit("pool", req.str("lease_id"))
			writeErr(w, http.StatusGatewayTimeout, "unknown_outcome", "leadership lost")
			return true
		}
		return false
	})
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release = %v, want success", err)
	}
	if n := len(fc.requests(path("/v1/semaphores/release"))); n != 2 {
		t.Fatalf("%d release attempts, want 2", n)
	}
	if err := c.ReleaseSemaphore(ctx, "pool", p.LeaseID()); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("second release = %v, want not_holder", err)
	}
}
