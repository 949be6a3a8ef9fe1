package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// startFake starts a fake cluster of n nodes, closed at the end of the test.
func startFake(t *testing.T, n int) *fakeCluster {
	t.Helper()
	fc := newFakeCluster(n)
	t.Cleanup(fc.Close)
	return fc
}

// newTestClient returns a client on endpoints driven by a fake clock.
func newTestClient(t *testing.T, endpoints []string, opts ...Option) (*Client, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	c, err := New(endpoints, append([]Option{WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, clk
}

// deadURL returns the URL of a server that is no longer listening.
func deadURL(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

func TestNew(t *testing.T) {
	tests := []struct {
		name      string
		endpoints []string
		opts      []Option
		want      []string
		wantErr   string
	}{
		{name: "urls", endpoints: []string{"http://10.0.0.1:8001/", "https://b:8002"}, want: []string{"http://10.0.0.1:8001", "https://b:8002"}},
		{name: "host:port", endpoints: []string{"127.0.0.1:8001", " 127.0.0.1:8002 "}, want: []string{"http://127.0.0.1:8001", "http://127.0.0.1:8002"}},
		{name: "duplicates", endpoints: []string{"a:1", "http://a:1"}, want: []string{"http://a:1"}},
		{name: "none", wantErr: "no endpoints"},
		{name: "path", endpoints: []string{"http://a:1/v1"}, wantErr: "bad endpoint"},
		{name: "scheme", endpoints: []string{"ftp://a:1"}, wantErr: "bad endpoint"},
		{name: "drift", endpoints: []string{"a:1"}, opts: []Option{WithDrift(0.5)}, wantErr: "drift"},
		{name: "negative drift", endpoints: []string{"a:1"}, opts: []Option{WithDrift(-0.1)}, wantErr: "drift"},
		{name: "backoff", endpoints: []string{"a:1"}, opts: []Option{WithBackoff(time.Second, time.Millisecond)}, wantErr: "backoff"},
		{name: "timeout", endpoints: []string{"a:1"}, opts: []Option{WithRequestTimeout(0)}, wantErr: "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.endpoints, tt.opts...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.Endpoints(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("Endpoints = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWritesGoToLeaderLearnedFromHeader(t *testing.T) {
	fc := startFake(t, 3)
	// Only a follower is given: the client must find n1 by itself.
	c, _ := newTestClient(t, []string{fc.node("n2").srv.URL})
	ctx := context.Background()

	lease, err := c.TryAcquire(ctx, "orders/1", AcquireOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Leader(); got != "n1" {
		t.Fatalf("Leader() = %q after first answer, want n1", got)
	}
	if _, err := c.Renew(ctx, "orders/1", lease.LeaseID(), 0); err != nil {
		t.Fatal(err)
	}
	fc.setLeader("n3")
	// Sent to n1, which still answers and names n3 as leader ...
	if _, err := c.Renew(ctx, "orders/1", lease.LeaseID(), 0); err != nil {
		t.Fatal(err)
	}
	// ... so this one goes to n3.
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var got []string
	for _, r := range fc.requests(nil) {
		got = append(got, r.Node+" "+r.Path)
	}
	want := []string{
		"n2 /v1/locks/acquire",
		"n2 /v1/cluster", // looks up where n1 is
		"n1 /v1/locks/renew",
		"n1 /v1/locks/renew",
		"n3 /v1/locks/release",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if eps := c.Endpoints(); len(eps) != 3 {
		t.Fatalf("client learned endpoints %v, want all 3 nodes", eps)
	}
}

func TestFailoverOnConnectionRefused(t *testing.T) {
	fc := startFake(t, 1)
	c, clk := newTestClient(t, []string{deadURL(t), fc.node("n1").srv.URL})
	for i := 0; i < 3; i++ {
		if _, err := c.Get(context.Background(), "x", true); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fc.requests(nil)); n != 3 {
		t.Fatalf("live node got %d requests, want 3", n)
	}
	// Failover is immediate: no backoff timer was needed.
	if len(clk.created) != 0 {
		t.Fatalf("timers created: %v, want none", clk.created)
	}
}

func TestFailoverWhenLeaderDies(t *testing.T) {
	fc := startFake(t, 3)
	c, _ := newTestClient(t, fc.Endpoints())
	ctx := context.Background()
	lease, err := c.TryAcquire(ctx, "a", AcquireOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	fc.node("n1").srv.Close()
	fc.setLeader("n2")
	if _, err := c.Renew(ctx, "a", lease.LeaseID(), 0); err != nil {
		t.Fatal(err)
	}
	if got := c.Leader(); got != "n2" {
		t.Fatalf("Leader() = %q, want n2", got)
	}
	renews := fc.requests(path("/v1/locks/renew"))
	if len(renews) != 1 || renews[0].Node == "n1" {
		t.Fatalf("renews %+v, want one, not on n1", renews)
	}
}

// TestRetryAfterHonoured checks that a 503 or 429 from the only node makes the
// client wait at least Retry-After (or a backoff without one) before asking
// again, and that it then succeeds.
func TestRetryAfterHonoured(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		code       string
		retryAfter string
		minWait    time.Duration
	}{
		{"no leader", 503, "no_leader", "2", 2 * time.Second},
		{"overloaded", 429, "overloaded", "1", time.Second},
		{"fractional", 503, "no_leader", "0.5", 500 * time.Millisecond},
		{"no header", 503, "no_leader", "", DefaultBackoffBase / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := startFake(t, 1)
			var fails atomic.Int32
			fails.Store(1)
			fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
				if fails.Add(-1) < 0 {
					return false
				}
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				writeErr(w, tt.status, tt.code, "try later")
				return true
			})
			c, clk := newTestClient(t, fc.Endpoints())
			done := make(chan error, 1)
			go func() {
				_, err := c.Get(context.Background(), "x", false)
				done <- err
			}()
			ds := clk.WaitPending(t, 1)
			if ds[0] < tt.minWait {
				t.Fatalf("client waits %v, want at least %v", ds[0], tt.minWait)
			}
			if n := len(fc.requests(nil)); n != 1 {
				t.Fatalf("%d requests before the wait was over, want 1", n)
			}
			clk.Advance(ds[0])
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := len(fc.requests(nil)); n != 2 {
				t.Fatalf("%d requests, want 2", n)
			}
		})
	}
}

func TestUnavailableMovesToAnotherEndpoint(t *testing.T) {
	for _, status := range []int{503, 429} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			fc := startFake(t, 2)
			fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
				if n.id != "n1" {
					return false
				}
				w.Header().Set("Retry-After", "5")
				writeErr(w, status, "no_leader", "busy")
				return true
			})
			c, clk := newTestClient(t, fc.Endpoints())
			for i := 0; i < 3; i++ {
				if _, err := c.Get(context.Background(), "x", true); err != nil {
					t.Fatal(err)
				}
			}
			// n1 is asked once, then left alone for its Retry-After.
			var nodes []string
			for _, r := range fc.requests(nil) {
				nodes = append(nodes, r.Node)
			}
			if strings.Join(nodes, ",") != "n1,n2,n2,n2" {
				t.Fatalf("requests went to %v", nodes)
			}
			if len(clk.created) != 0 {
				t.Fatalf("client waited %v, want no wait", clk.created)
			}
		})
	}
}

func TestContextBoundsTotalTime(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		c, err := New([]string{deadURL(t), deadURL(t)}, WithBackoff(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.Get(ctx, "x", false)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("err = %v, want deadline exceeded after connection refused", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %v", d)
		}
	})
	t.Run("retry-after beyond deadline", func(t *testing.T) {
		fc := startFake(t, 1)
		fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Retry-After", "60")
			writeErr(w, 503, "no_leader", "election in progress")
			return true
		})
		c, _ := newTestClient(t, fc.Endpoints())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.TryAcquire(ctx, "x", AcquireOptions{})
		// It gives up at once with the server's reason rather than
		// sleeping into the deadline.
		if !errors.Is(err, ErrNoLeader) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrNoLeader and deadline exceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v, want an answer at once", d)
		}
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 503 || ae.RetryAfter != time.Minute || ae.Node != "n1" {
			t.Fatalf("err = %#v", err)
		}
	})
}

func TestIdempotentAcquireRetry(t *testing.T) {
	fc := startFake(t, 3)
	// The leader grants the first acquire but the answer is lost.
	var dropped atomic.Bool
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path != "/v1/locks/acquire" || dropped.Swap(true) {
			return false
		}
		n.serve(httptest.NewRecorder(), r)
		dropConnection(w)
		return true
	})
	c, _ := newTestClient(t, fc.Endpoints())
	lease, err := c.TryAcquire(context.Background(), "a", AcquireOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	acq := fc.requests(path("/v1/locks/acquire"))
	if len(acq) != 2 {
		t.Fatalf("%d acquire requests, want 2", len(acq))
	}
	if acq[0].str("lease_id") != acq[1].str("lease_id") || acq[0].str("lease_id") != lease.LeaseID() {
		t.Fatalf("lease ids %q, %q, lease %q: want all equal", acq[0].str("lease_id"), acq[1].str("lease_id"), lease.LeaseID())
	}
	h, _ := fc.holder("a")
	if lease.Token() != h.token || h.token != 10481 {
		t.Fatalf("token %d, server %d, want one grant (10481)", lease.Token(), h.token)
	}
}

func TestAmbiguousAcquireRetriedUntilContextEnds(t *testing.T) {
	fc := startFake(t, 3)
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path != "/v1/locks/acquire" {
			return false
		}
		n.serve(httptest.NewRecorder(), r)
		dropConnection(w)
		return true
	})
	c, err := New(fc.Endpoints(), WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.TryAcquire(ctx, "a", AcquireOptions{TTL: 3 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	acq := fc.requests(path("/v1/locks/acquire"))
	if len(acq) < 4 {
		t.Fatalf("%d attempts, want retries on all nodes", len(acq))
	}
	for _, r := range acq {
		if r.str("lease_id") != acq[0].str("lease_id") {
			t.Fatalf("lease id changed between retries")
		}
	}
	// The lease nobody will use is released rather than left to expire.
	if _, held := fc.holder("a"); held {
		t.Fatal("abandoned acquire still holds the lock")
	}
	rel := fc.requests(path("/v1/locks/release"))
	if len(rel) == 0 || rel[0].str("lease_id") != acq[0].str("lease_id") {
		t.Fatalf("release requests %+v", rel)
	}
}

func TestTryAcquireHeld(t *testing.T) {
	fc := startFake(t, 1)
	token := fc.hold("a", "worker-b", NewLeaseID())
	c, _ := newTestClient(t, fc.Endpoints())
	_, err := c.TryAcquire(context.Background(), "a", AcquireOptions{})
	var he *HeldError
	if !errors.Is(err, ErrHeld) || !errors.As(err, &he) {
		t.Fatalf("err = %v, want *HeldError", err)
	}
	if he.Owner != "worker-b" || he.Token != token || he.Name != "a" || he.Status != 409 {
		t.Fatalf("HeldError = %+v", he)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeHeld {
		t.Fatalf("no *APIError in %v", err)
	}
	if errors.Is(err, ErrNotHolder) || errors.Is(err, ErrNoLeader) {
		t.Fatal("HeldError matches other sentinels")
	}
	if acq := fc.requests(path("/v1/locks/acquire")); len(acq) != 1 || acq[0].num("wait_ms") != 0 {
		t.Fatalf("TryAcquire sent %+v, want one request without wait", acq)
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	fc := startFake(t, 1)
	old := fc.hold("a", "worker-b", NewLeaseID())
	c, _ := newTestClient(t, fc.Endpoints())
	got := make(chan *Lease, 1)
	go func() {
		l, err := c.Acquire(context.Background(), "a", AcquireOptions{Owner: "worker-a", Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, func() bool { return len(fc.requests(path("/v1/locks/acquire"))) == 1 }, "acquire")
	if w := fc.requests(path("/v1/locks/acquire"))[0].num("wait_ms"); w != 20000 {
		t.Fatalf("wait_ms = %d, want 20000", w)
	}
	fc.drop("a")
	l := <-got
	if l == nil {
		return
	}
	defer l.Release(context.Background())
	if l.Token() <= old || l.Owner() != "worker-a" {
		t.Fatalf("token %d (previous holder %d), owner %q", l.Token(), old, l.Owner())
	}
}

func TestAcquireRoundsUntilContextEnds(t *testing.T) {
	fc := startFake(t, 1)
	fc.hold("a", "worker-b", NewLeaseID())
	c, _ := newTestClient(t, fc.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(ctx, "a", AcquireOptions{Wait: 200 * time.Millisecond})
	if !errors.Is(err, ErrHeld) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want held and deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	acq := fc.requests(path("/v1/locks/acquire"))
	if len(acq) < 2 {
		t.Fatalf("%d rounds, want at least 2", len(acq))
	}
	for _, r := range acq {
		if w := r.num("wait_ms"); w > 200 {
			t.Fatalf("round waits %dms, more than the round or the context allows", w)
		}
		if r.str("lease_id") != acq[0].str("lease_id") {
			t.Fatal("lease id changed between rounds")
		}
	}
}

func TestAcquireAfterLongWaitRenewsForFreshDeadline(t *testing.T) {
	fc := startFake(t, 1)
	c, clk := newTestClient(t, fc.Endpoints())
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path == "/v1/locks/acquire" {
			clk.Advance(5 * time.Second) // the grant came late in a long wait
		}
		return false
	})
	start := clk.Now()
	l, err := c.Acquire(context.Background(), "a", AcquireOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if n := len(fc.requests(path("/v1/locks/renew"))); n != 1 {
		t.Fatalf("%d renews, want 1 right after the acquire", n)
	}
	want := start.Add(5*time.Second + c.validFor(3*time.Second))
	if !l.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v (renew send time + TTL×0.99)", l.Deadline().Sub(start), want.Sub(start))
	}
}

func TestAcquireValidation(t *testing.T) {
	c, _ := newTestClient(t, []string{deadURL(t)})
	tests := []struct {
		name string
		lock string
		opts AcquireOptions
	}{
		{"empty name", "", AcquireOptions{}},
		{"negative ttl", "a", AcquireOptions{TTL: -time.Second}},
		{"short lease id", "a", AcquireOptions{LeaseID: "abc"}},
		{"bad lease id", "a", AcquireOptions{LeaseID: "abcdefghijklmnop!"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.TryAcquire(context.Background(), tt.lock, tt.opts); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestNewLeaseID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := NewLeaseID()
		if len(id) < 22 || !api.ValidLeaseID(id) || seen[id] {
			t.Fatalf("bad or repeated lease id %q", id)
		}
		seen[id] = true
	}
}

func TestReadsAndClusterOps(t *testing.T) {
	fc := startFake(t, 3)
	c, _ := newTestClient(t, fc.Endpoints())
	ctx := context.Background()
	fc.hold("orders/89 041", "worker-b", NewLeaseID())
	fc.hold("orders/2", "worker-c", NewLeaseID())
	fc.hold("other", "worker-d", NewLeaseID())

	info, err := c.Get(ctx, "orders/89 041", false)
	if err != nil || !info.Held || info.Owner != "worker-b" || info.Token != 10481 || info.TTL != 10*time.Second {
		t.Fatalf("Get = %+v, %v", info, err)
	}
	if info, err := c.Get(ctx, "free", true); err != nil || info.Held || info.Name != "free" {
		t.Fatalf("Get free = %+v, %v", info, err)
	}
	if got := fc.requests(path("/v1/locks/free")); len(got) != 1 {
		t.Fatalf("stale get requests %+v", got)
	}

	list, err := c.List(ctx, "orders/", 1)
	if err != nil || len(list.Locks) != 1 || list.Locks[0].Name != "orders/2" || !list.Truncated {
		t.Fatalf("List = %+v, %v", list, err)
	}

	cs, err := c.Cluster(ctx)
	if err != nil || cs.Leader != "n1" || len(cs.Nodes) != 3 || cs.Term != 3 {
		t.Fatalf("Cluster = %+v, %v", cs, err)
	}

	if err := c.Join(ctx, "n4", "127.0.0.1:9004", "127.0.0.1:8004"); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TransferLeadership(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TransferLeadership(ctx, ""); err != nil {
		t.Fatal(err)
	}
	join := fc.requests(path("/v1/cluster/join"))
	if len(join) != 1 || join[0].str("id") != "n4" || join[0].str("raft_addr") != "127.0.0.1:9004" || join[0].Node != "n1" {
		t.Fatalf("join requests %+v", join)
	}
	tr := fc.requests(path("/v1/cluster/transfer-leadership"))
	if len(tr) != 2 || tr[0].str("id") != "n3" || tr[1].Node != "n3" || len(tr[1].Body) != 0 {
		t.Fatalf("transfer requests %+v", tr)
	}

	if err := c.Health(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx, fc.node("n2").srv.URL); err != nil {
		t.Fatal(err)
	}
	fc.setLeader("")
	if err := c.Ready(ctx, ""); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Ready without leader = %v", err)
	}
	if err := c.Health(ctx, deadURL(t)); err == nil {
		t.Fatal("Health of a dead node succeeded")
	}
}

func TestBadRequestIsNotRetried(t *testing.T) {
	fc := startFake(t, 2)
	c, _ := newTestClient(t, fc.Endpoints())
	_, err := c.TryAcquire(context.Background(), "a", AcquireOptions{TTL: time.Millisecond})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeBadRequest || ae.Status != 400 || !strings.Contains(ae.Message, "ttl_ms") {
		t.Fatalf("err = %v", err)
	}
	if n := len(fc.requests(nil)); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}
