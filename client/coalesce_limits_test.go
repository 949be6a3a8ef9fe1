package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/internal/nodeapi"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/httpfault"
)

// followerStore is a node that never leads and knows that n1 leads at addr:
// it forwards every write there.
type followerStore struct{ addr string }

func (f followerStore) ID() string               { return "n2" }
func (f followerStore) Leader() (string, string) { return "n1", f.addr }
func (f followerStore) Ready() bool              { return true }
func (f followerStore) WaitForLeader(context.Context) (string, string, error) {
	return "n1", f.addr, nil
}
func (f followerStore) Apply(context.Context, fsm.Command) (fsm.Result, error) {
	return fsm.Result{}, nodeapi.ErrNotLeader
}
func (f followerStore) Acquire(context.Context, fsm.Command, time.Duration) (fsm.Result, error) {
	return fsm.Result{}, nodeapi.ErrNotLeader
}
func (f followerStore) Read(context.Context, bool) (nodeapi.LockReader, error) {
	return nil, nodeapi.ErrNotLeader
}
func (f followerStore) Status() (nodeapi.Status, error) {
	return nodeapi.Status{}, errors.New("no status")
}
func (f followerStore) Join(context.Context, string, string, string) error {
	return nodeapi.ErrNotLeader
}
func (f followerStore) Leave(context.Context, string) error              { return nodeapi.ErrNotLeader }
func (f followerStore) TransferLeadership(context.Context, string) error { return nodeapi.ErrNotLeader }
func (f followerStore) CheckState(context.Context) (uint64, error)       { return 0, nodeapi.ErrNotLeader }

// A coalesced acquire sent to a follower whose relay to the leader breaks
// after the leader's answer's head may have been applied: the caller gets
// ErrUnknownOutcome, never a lease it may not hold.
func TestCoalescedAcquireCutAfterHeadIsUnknown(t *testing.T) {
	gate := make(chan struct{})
	arrived := make(chan string, 16)
	var token sync.Mutex
	next := uint64(0)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Name    string `json:"name"`
			LeaseID string `json:"lease_id"`
		}
		json.NewDecoder(r.Body).Decode(&b)
		if strings.HasPrefix(b.Name, "single-") {
			arrived <- b.Name
			<-gate
			token.Lock()
			next++
			tok := next
			token.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"name":%q,"owner":"","lease_id":%q,"fencing_token":%d,"ttl_ms":10000}`, b.Name, b.LeaseID, tok)
			return
		}
		// Applied, and the answer's head sent; then the connection broke.
		if err := httpfault.Break(w, r, httpfault.HeadWithoutBody); err != nil {
			t.Errorf("break the answer: %v", err)
		}
	}))
	t.Cleanup(leader.Close)
	node := httptest.NewServer(httpapi.New(followerStore{strings.TrimPrefix(leader.URL, "http://")}, httpapi.Options{}))
	t.Cleanup(node.Close)
	c, err := New([]string{node.URL}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testenv.Context(t, 30*time.Second)

	fills := fillExchanges(t, ctx, c, arrived)
	type got struct {
		l   *Lease
		err error
	}
	victims := make(chan got, 2)
	// Each retry of the same lease is cut off too: the calls end with
	// their context, their outcome unknown.
	vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for i := range 2 {
		go func() {
			l, err := c.TryAcquire(vctx, fmt.Sprintf("victim-%d", i), AcquireOptions{TTL: 10 * time.Second})
			victims <- got{l, err}
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return queuedCalls(c, node.URL) == 2 })
	close(gate)
	for range 2 {
		g := <-victims
		if g.err == nil {
			g.l.Detach()
			t.Errorf("acquire of %s whose outcome is unknown answered a grant with fencing token %d", g.l.Name(), g.l.Token())
		} else if !errors.Is(g.err, ErrUnknownOutcome) {
			t.Errorf("error %v, want ErrUnknownOutcome", g.err)
		}
	}
	for range coalesceInflight {
		if err := <-fills; err != nil {
			t.Fatal(err)
		}
	}
}

// gatedProxy forwards to target, holding every acquire of a lock named
// single-* until gate is closed; arrived gets each one held.
func gatedProxy(t *testing.T, target string, gate <-chan struct{}, arrived chan<- string) *httptest.Server {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.URL.Path == "/v1/locks/acquire" && bytes.Contains(body, []byte(`"single-`)) {
			arrived <- string(body)
			<-gate
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Acquires each well within the body limit, made at once, whose bodies
// together are over it, are not batched past the limit: each is granted as
// it would be alone. A value of "<" characters is 6 bytes each once
// JSON-encoded (\u003c), so three acquires with the largest value the
// contract allows make 72 KiB.
func TestCoalescedAcquiresOverTheBodyLimitTogether(t *testing.T) {
	cl := testenv.Start(t, 1)
	gate := make(chan struct{})
	arrived := make(chan string, 16)
	node := gatedProxy(t, cl.Leader().URL(), gate, arrived)
	c, err := New([]string{node.URL}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testenv.Context(t, 30*time.Second)

	fills := fillExchanges(t, ctx, c, arrived)
	value := strings.Repeat("<", api.MaxValue)
	const n = 3
	errs := make(chan error, n)
	for i := range n {
		go func() {
			l, err := c.TryAcquire(ctx, fmt.Sprintf("big-%d", i), AcquireOptions{TTL: 10 * time.Second, Value: value})
			if err == nil {
				l.Detach()
			}
			errs <- err
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return queuedCalls(c, node.URL) == n })
	close(gate)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("an acquire the node grants alone: %v", err)
		}
	}
	for range coalesceInflight {
		if err := <-fills; err != nil {
			t.Fatal(err)
		}
	}
	// Each alone: granted.
	l, err := c.TryAcquire(ctx, "alone", AcquireOptions{TTL: 10 * time.Second, Value: value})
	if err != nil {
		t.Fatalf("alone: %v", err)
	}
	l.Detach()
}

// A caller whose context ends while its call is in a batch under way
// returns at once, its outcome unknown, as a call alone would: it does not
// wait out the batch's exchange (here held by the node).
func TestCoalescedCallReturnsWhenItsContextEnds(t *testing.T) {
	gate, hold := make(chan struct{}), make(chan struct{})
	arrived := make(chan string, 16)
	batchIn := make(chan struct{}, 1)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("X-Raftlock-Node", "n1")
		w.Header().Set("X-Raftlock-Leader", "n1")
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/locks/acquire":
			arrived <- r.URL.Path
			<-gate
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":"held","message":"held","holder":{"owner":"x","fencing_token":1}}`)
		case "/v1/batch":
			batchIn <- struct{}{}
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(node.Close)
	c, err := New([]string{node.URL}, WithRequestTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	fillExchanges(t, context.Background(), c, arrived) // answered 409 held once the gate opens
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 2
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.TryAcquire(ctx, fmt.Sprintf("given-up-%d", i), AcquireOptions{TTL: 10 * time.Second})
			errs <- err
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return queuedCalls(c, node.URL) == n })
	close(gate)
	<-batchIn
	cancel()
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnknownOutcome) {
				t.Errorf("err %v, want the context's and ErrUnknownOutcome", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call whose context ended is still blocked on its batch 10s later (request timeout 1m)")
		}
	}
	// The batch's exchange ends when the node answers; then no connection
	// is left in use, and Close (a cleanup) closes them all.
	close(hold)
	testenv.WaitFor(t, 10*time.Second, "the batch's exchange to end", func() bool {
		q := c.coalescerFor(node.URL)
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inflight == 0
	})
}
