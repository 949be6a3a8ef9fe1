package raftnode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
	"go.uber.org/goleak"
)

// waitClient sends acquires that may park, each on its own connection so a
// cancelled one really goes away.
type waitResponse struct {
	status int
	body   map[string]any
	err    error
}

func acquireWaiting(ctx context.Context, url, name, lease string, waitMs int) <-chan waitResponse {
	out := make(chan waitResponse, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"name": name, "owner": lease, "lease_id": lease, "ttl_ms": 60000, "wait_ms": waitMs})
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/locks/acquire", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			out <- waitResponse{err: err}
			return
		}
		defer resp.Body.Close()
		body := map[string]any{}
		json.NewDecoder(resp.Body).Decode(&body)
		out <- waitResponse{status: resp.StatusCode, body: body}
	}()
	return out
}

func leaseOf(i int) string { return fmt.Sprintf("waiter-%02d-0123456789abcdef", i) }

// checkNoLeaks fails the test if goroutines started during it outlive the
// cluster (parked waiters, timers, dispatchers).
func checkNoLeaks(t *testing.T, c *testenv.Cluster) {
	opts := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		c.Close()
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(opts, goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop")); err != nil {
			t.Error(err)
		}
	})
}

func TestWaitersGrantedInArrivalOrder(t *testing.T) {
	c := testenv.Start(t, 3)
	checkNoLeaks(t, c)
	leader := c.Leader()
	follower := c.Followers()[0]
	status, body := acquire(t, leader, "fifo", "holder", leaseA, 60000)
	if status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	last := token(t, body)

	const n = 20
	answers := make([]<-chan waitResponse, n)
	for i := 0; i < n; i++ {
		via := leader
		if i%2 == 1 {
			via = follower // waiters that reach a follower wait on the forwarded request
		}
		answers[i] = acquireWaiting(context.Background(), via.URL(), "fifo", leaseOf(i), 30000)
		testenv.WaitFor(t, 5*time.Second, fmt.Sprintf("waiter %d to park", i), func() bool { return leader.Waiters() == i+1 })
	}
	release := func(lease string) {
		t.Helper()
		if status, body := call(t, "POST", leader.URL()+"/v1/locks/release", map[string]any{"name": "fifo", "lease_id": lease}); status != 200 {
			t.Fatalf("release %s: %d %v", lease, status, body)
		}
	}
	release(leaseA)
	for i := 0; i < n; i++ {
		r := <-answers[i]
		if r.err != nil || r.status != 200 || r.body["lease_id"] != leaseOf(i) {
			t.Fatalf("waiter %d: %v %d %v", i, r.err, r.status, r.body)
		}
		tok := token(t, r.body)
		if tok <= last {
			t.Fatalf("waiter %d got token %d after %d", i, tok, last)
		}
		last = tok
		for j := i + 1; j < n; j++ {
			select {
			case r := <-answers[j]:
				t.Fatalf("waiter %d answered before waiter %d released: %+v", j, i, r)
			default:
			}
		}
		release(leaseOf(i))
	}
}

func TestCancelledWaiterIsSkipped(t *testing.T) {
	c := testenv.Start(t, 3)
	checkNoLeaks(t, c)
	leader := c.Leader()
	if status, body := acquire(t, leader, "skip", "holder", leaseA, 60000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	first := acquireWaiting(context.Background(), leader.URL(), "skip", leaseOf(1), 30000)
	testenv.WaitFor(t, 5*time.Second, "first waiter", func() bool { return leader.Waiters() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	gone := acquireWaiting(ctx, leader.URL(), "skip", leaseOf(2), 30000)
	testenv.WaitFor(t, 5*time.Second, "second waiter", func() bool { return leader.Waiters() == 2 })
	third := acquireWaiting(context.Background(), leader.URL(), "skip", leaseOf(3), 30000)
	testenv.WaitFor(t, 5*time.Second, "third waiter", func() bool { return leader.Waiters() == 3 })

	cancel()
	<-gone
	testenv.WaitFor(t, 5*time.Second, "the cancelled waiter to leave", func() bool { return leader.Waiters() == 2 })

	call(t, "POST", leader.URL()+"/v1/locks/release", map[string]any{"name": "skip", "lease_id": leaseA})
	if r := <-first; r.status != 200 || r.body["lease_id"] != leaseOf(1) {
		t.Fatalf("first waiter: %+v", r)
	}
	call(t, "POST", leader.URL()+"/v1/locks/release", map[string]any{"name": "skip", "lease_id": leaseOf(1)})
	if r := <-third; r.status != 200 || r.body["lease_id"] != leaseOf(3) {
		t.Fatalf("third waiter after a cancelled one: %+v", r)
	}
}

func TestWaitRunsOutWithHeld(t *testing.T) {
	c := testenv.Start(t, 3)
	checkNoLeaks(t, c)
	leader := c.Leader()
	if status, body := acquire(t, leader, "busy", "holder", leaseA, 60000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	r := <-acquireWaiting(context.Background(), c.Followers()[0].URL(), "busy", leaseOf(1), 100)
	holder, _ := r.body["holder"].(map[string]any)
	if r.status != 409 || r.body["error"] != "held" || holder["owner"] != "holder" {
		t.Fatalf("wait ran out: %+v", r)
	}
	if leader.Waiters() != 0 {
		t.Fatalf("%d waiters left parked", leader.Waiters())
	}
	// A waiter never jumps: with someone parked, an acquire that does not wait is refused.
	parked := acquireWaiting(context.Background(), leader.URL(), "busy", leaseOf(2), 30000)
	testenv.WaitFor(t, 5*time.Second, "a parked waiter", func() bool { return leader.Waiters() == 1 })
	call(t, "POST", leader.URL()+"/v1/locks/release", map[string]any{"name": "busy", "lease_id": leaseA})
	if r := <-parked; r.status != 200 {
		t.Fatalf("parked waiter: %+v", r)
	}
}

func TestWaiterCapAnswersOverloaded(t *testing.T) {
	c := testenv.Start(t, 3, testenv.Options{Configure: func(cfg *raftnode.Config) { cfg.MaxWaitersPerLock = 2 }})
	checkNoLeaks(t, c)
	leader := c.Leader()
	acquire(t, leader, "capped", "holder", leaseA, 60000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w1 := acquireWaiting(ctx, leader.URL(), "capped", leaseOf(1), 30000)
	w2 := acquireWaiting(ctx, leader.URL(), "capped", leaseOf(2), 30000)
	testenv.WaitFor(t, 5*time.Second, "two waiters", func() bool { return leader.Waiters() == 2 })
	r := <-acquireWaiting(ctx, leader.URL(), "capped", leaseOf(3), 30000)
	if r.status != 429 || r.body["error"] != "overloaded" {
		t.Fatalf("third waiter over the cap: %+v", r)
	}
	cancel()
	<-w1
	<-w2
	testenv.WaitFor(t, 5*time.Second, "waiters to leave", func() bool { return leader.Waiters() == 0 })
}

func TestLeaderChangeFailsParkedWaiters(t *testing.T) {
	c := testenv.Start(t, 3)
	old := c.Leader()
	acquire(t, old, "moving", "holder", leaseA, 60000)
	w := acquireWaiting(context.Background(), old.URL(), "moving", leaseOf(1), 30000)
	testenv.WaitFor(t, 5*time.Second, "a parked waiter", func() bool { return old.Waiters() == 1 })
	if status, body := call(t, "POST", old.URL()+"/v1/cluster/transfer-leadership", map[string]any{}); status != 200 {
		t.Fatalf("transfer: %d %v", status, body)
	}
	r := <-w
	if r.status != 503 || r.body["error"] != "no_leader" {
		t.Fatalf("parked waiter on a leader change: %+v", r)
	}
	// The client re-enters the wait on the new leader with the same lease id.
	leader := c.WaitForNewLeader(old)
	again := acquireWaiting(context.Background(), leader.URL(), "moving", leaseOf(1), 30000)
	testenv.WaitFor(t, 5*time.Second, "the waiter to park again", func() bool { return leader.Waiters() == 1 })
	call(t, "POST", leader.URL()+"/v1/locks/release", map[string]any{"name": "moving", "lease_id": leaseA})
	if r := <-again; r.status != 200 || r.body["lease_id"] != leaseOf(1) {
		t.Fatalf("re-entered waiter: %+v", r)
	}
}

func TestLockDelayAfterExpiryNotAfterRelease(t *testing.T) {
	clock := &testenv.ManualClock{}
	c := testenv.Start(t, 3, testenv.Options{Clock: clock})
	leader := c.Leader()
	withDelay := func(name, lease string) {
		t.Helper()
		status, body := call(t, "POST", leader.URL()+"/v1/locks/acquire", map[string]any{"name": name, "owner": "a", "lease_id": lease, "ttl_ms": 1000, "lock_delay_ms": 500})
		if status != 200 {
			t.Fatalf("acquire with lock-delay: %d %v", status, body)
		}
	}
	withDelay("delayed", leaseA)
	clock.Advance(1200 * time.Millisecond) // expired; the delay runs from the entry that expired it
	status, body := acquire(t, leader, "delayed", "b", leaseB, 1000)
	holder, _ := body["holder"].(map[string]any)
	if status != 409 || body["error"] != "held" || holder["owner"] != "a" || body["retry_after_ms"] == nil {
		t.Fatalf("during lock-delay: %d %v", status, body)
	}
	clock.Advance(500 * time.Millisecond)
	if status, body := acquire(t, leader, "delayed", "b", leaseB, 1000); status != 200 {
		t.Fatalf("after lock-delay: %d %v", status, body)
	}

	withDelay("released", leaseA)
	call(t, "POST", leader.URL()+"/v1/locks/release", map[string]any{"name": "released", "lease_id": leaseA})
	if status, body := acquire(t, leader, "released", "b", leaseB, 1000); status != 200 {
		t.Fatalf("lock-delay applied after a release: %d %v", status, body)
	}
}
