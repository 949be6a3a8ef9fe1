package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/httpfault"
)

// batchNode is a node that answers acquires (alone or in batches) with a
// lease of the lock named, each with the next token. An acquire sent alone
// waits for gate, so that a test decides when the exchanges under way end.
type batchNode struct {
	srv     *httptest.Server
	gate    chan struct{}
	arrived chan string // the name of each acquire sent alone, as it arrives
	noBatch bool        // answer /v1/batch 404, as a node from before batches
	// batchGate, when set, holds each batch's answer until it is closed;
	// the names of each batch's calls come on batchArrived as it arrives.
	batchGate    chan struct{}
	batchArrived chan []string
	mu           sync.Mutex
	token        uint64
	batches      [][]string // the names of each batch's calls
	singles      []string
	received     map[string]int // every name, however it came
}

func newBatchNode(t *testing.T) *batchNode {
	n := &batchNode{gate: make(chan struct{}), arrived: make(chan string, 64), received: map[string]int{}}
	n.srv = httptest.NewServer(http.HandlerFunc(n.serve))
	t.Cleanup(n.srv.Close)
	return n
}

type acquireBody struct {
	Name    string `json:"name"`
	LeaseID string `json:"lease_id"`
}

func (n *batchNode) lease(b acquireBody) []byte {
	n.mu.Lock()
	n.token++
	n.received[b.Name]++
	tok := n.token
	n.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"name": b.Name, "owner": "", "lease_id": b.LeaseID, "fencing_token": tok, "ttl_ms": 10000})
	return out
}

func (n *batchNode) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Raftlock-Node", "n1")
	w.Header().Set("X-Raftlock-Leader", "n1")
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/locks/acquire":
		var b acquireBody
		json.NewDecoder(r.Body).Decode(&b)
		n.mu.Lock()
		n.singles = append(n.singles, b.Name)
		n.mu.Unlock()
		if strings.HasPrefix(b.Name, "broken-") {
			httpfault.Break(w, r, "")
			return
		}
		n.arrived <- b.Name
		<-n.gate
		w.Write(n.lease(b))
	case "/v1/batch":
		if n.noBatch {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"not_found","message":"no route"}`))
			return
		}
		var req struct {
			Calls []struct {
				Path string      `json:"path"`
				Body acquireBody `json:"body"`
			} `json:"calls"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		var names, results []string
		for _, c := range req.Calls {
			names = append(names, c.Body.Name)
			results = append(results, `{"status":200,"body":`+string(n.lease(c.Body))+`}`)
		}
		n.mu.Lock()
		n.batches = append(n.batches, names)
		n.mu.Unlock()
		if n.batchGate != nil {
			n.batchArrived <- names
			<-n.batchGate
		}
		if slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "broken-") }) {
			httpfault.Break(w, r, "") // the calls may all have been applied
			return
		}
		w.Write([]byte(`{"results":[` + strings.Join(results, ",") + `]}`))
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// fillExchanges starts coalesceInflight acquires of locks single-0, ...,
// which the node holds, and returns once the node has said (on arrived) it
// has them all; their errors come on the channel it returns.
func fillExchanges(t *testing.T, ctx context.Context, c *Client, arrived <-chan string) <-chan error {
	t.Helper()
	done := make(chan error, coalesceInflight)
	for i := range coalesceInflight {
		go func() {
			l, err := c.TryAcquire(ctx, fmt.Sprintf("single-%d", i), AcquireOptions{TTL: 10 * time.Second})
			if err == nil {
				l.Detach() // no watchdog: the test's nodes need no renew
			}
			done <- err
		}()
	}
	for range coalesceInflight {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the first acquires never reached the node")
		}
	}
	return done
}

func queuedCalls(c *Client, u string) int { return c.coalescerFor(u).queued() }

// Calls made while the node has coalesceInflight exchanges under way wait
// and then go in one batch, and each gets its own lock's answer.
func TestCoalescedCallsShareOneExchange(t *testing.T) {
	n := newBatchNode(t)
	c, _ := newTestClient(t, []string{n.srv.URL})
	done := fillExchanges(t, context.Background(), c, n.arrived)

	type got struct {
		name string
		l    *Lease
		err  error
	}
	const queued = 5
	results := make(chan got, queued)
	for i := range queued {
		name := fmt.Sprintf("batched-%d", i)
		go func() {
			l, err := c.TryAcquire(context.Background(), name, AcquireOptions{TTL: 10 * time.Second})
			results <- got{name, l, err}
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return queuedCalls(c, n.srv.URL) == queued })
	close(n.gate)

	tokens := map[uint64]bool{}
	for range queued {
		r := <-results
		if r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
		r.l.Detach()
		if r.l.Name() != r.name || tokens[r.l.Token()] {
			t.Errorf("%s got lease of %s with token %d (seen: %v)", r.name, r.l.Name(), r.l.Token(), tokens[r.l.Token()])
		}
		tokens[r.l.Token()] = true
	}
	for range coalesceInflight {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.batches) != 1 || len(n.batches[0]) != queued || len(n.singles) != coalesceInflight {
		t.Fatalf("node saw batches %v and single calls %v; want one batch of the %d queued calls", n.batches, n.singles, queued)
	}
}

// While a batch is under way, a call made meanwhile waits for it even
// though fewer than coalesceInflight exchanges are under way: another
// exchange would start another Raft round for what the next batch carries.
func TestCallWaitsForTheBatchUnderWay(t *testing.T) {
	n := newBatchNode(t)
	n.batchGate, n.batchArrived = make(chan struct{}), make(chan []string, 4)
	answerBatches := sync.OnceFunc(func() { close(n.batchGate) })
	t.Cleanup(answerBatches) // before the node closes, should the test fail first
	c, _ := newTestClient(t, []string{n.srv.URL})
	ctx := testenv.Context(t, 30*time.Second)
	done := fillExchanges(t, ctx, c, n.arrived) // lone calls go at once, two of them
	acquire := func(name string) <-chan error {
		out := make(chan error, 1)
		go func() {
			l, err := c.TryAcquire(ctx, name, AcquireOptions{TTL: 10 * time.Second})
			if err == nil {
				l.Detach()
			}
			out <- err
		}()
		return out
	}
	var batched []<-chan error
	for i := range 3 {
		batched = append(batched, acquire(fmt.Sprintf("batched-%d", i)))
	}
	testenv.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return queuedCalls(c, n.srv.URL) == 3 })
	close(n.gate) // the lone calls end; the queued ones go as one batch
	select {
	case names := <-n.batchArrived:
		if len(names) != 3 {
			t.Fatalf("batch of %v, want the three queued calls", names)
		}
	case <-ctx.Done():
		t.Fatal("the queued calls never went")
	}
	for range coalesceInflight {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	later := acquire("later")
	testenv.WaitFor(t, 10*time.Second, "the later call to wait for the batch", func() bool { return queuedCalls(c, n.srv.URL) == 1 })
	answerBatches()
	for _, ch := range append(batched, later) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if fmt.Sprint(n.singles) != "[single-0 single-1 later]" && fmt.Sprint(n.singles) != "[single-1 single-0 later]" {
		t.Fatalf("calls sent alone: %v; want the two first and the later one, after the batch", n.singles)
	}
}

// A call whose context ends while it waits for a batch is never sent, and
// says so: not an unknown outcome.
func TestCoalescedCallGivenUpBeforeItIsSent(t *testing.T) {
	n := newBatchNode(t)
	c, _ := newTestClient(t, []string{n.srv.URL})
	done := fillExchanges(t, context.Background(), c, n.arrived)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(ctx, "given-up", AcquireOptions{TTL: 10 * time.Second})
		errc <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the call to queue", func() bool { return queuedCalls(c, n.srv.URL) == 1 })
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("err %v, want context.Canceled and not ErrUnknownOutcome", err)
	}
	close(n.gate)
	for range coalesceInflight {
		<-done
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.received["given-up"] != 0 || len(n.batches) != 0 {
		t.Fatalf("the node got the call given up (%d times; batches %v)", n.received["given-up"], n.batches)
	}
}

// A node that has no batches (404) gets the queued calls one by one, and
// later calls are never batched for it again.
func TestCoalescingFallsBackForANodeWithoutBatches(t *testing.T) {
	n := newBatchNode(t)
	n.noBatch = true
	c, _ := newTestClient(t, []string{n.srv.URL})
	done := fillExchanges(t, context.Background(), c, n.arrived)
	errc := make(chan error, 3)
	for i := range 3 {
		go func() {
			l, err := c.TryAcquire(context.Background(), fmt.Sprintf("old-%d", i), AcquireOptions{TTL: 10 * time.Second})
			if err == nil {
				l.Detach()
			}
			errc <- err
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return queuedCalls(c, n.srv.URL) == 3 })
	close(n.gate)
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for range coalesceInflight {
		<-done
	}
	q := c.coalescerFor(n.srv.URL)
	q.mu.Lock()
	alone := q.alone
	q.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if !alone || len(n.singles) != coalesceInflight+3 {
		t.Fatalf("alone %v, single calls %v: want every call sent alone after the 404", alone, n.singles)
	}
}

// A batch whose exchange fails leaves each of its calls' outcome unknown:
// they are resent (same lease), and a call whose context ends first says
// ErrUnknownOutcome, never a definite refusal.
func TestFailedBatchExchangeLeavesEachCallUnknown(t *testing.T) {
	n := newBatchNode(t)
	c, _ := newTestClient(t, []string{n.srv.URL})
	done := fillExchanges(t, context.Background(), c, n.arrived)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errc := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := c.TryAcquire(ctx, fmt.Sprintf("broken-%d", i), AcquireOptions{TTL: 10 * time.Second})
			errc <- err
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return queuedCalls(c, n.srv.URL) == 2 })
	close(n.gate)
	for range 2 {
		if err := <-errc; !errors.Is(err, ErrUnknownOutcome) {
			t.Errorf("a call of a batch whose exchange broke: %v, want ErrUnknownOutcome", err)
		}
	}
	for range coalesceInflight {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.batches) == 0 || len(n.batches[0]) != 2 {
		t.Fatalf("batches %v: want the two calls sent together first", n.batches)
	}
}

// A 200 to a batch that does not answer each call leaves each call's
// outcome unknown: the calls ran.
func TestMalformedBatchAnswer(t *testing.T) {
	resp := &response{status: 200, header: http.Header{}, body: []byte(`{"results":[{"status":200,"body":{}}]}`)}
	if _, err := splitBatchAnswer(resp, 2); !errors.Is(err, errBatchAnswer) {
		t.Fatalf("one result for two calls: err %v, want errBatchAnswer", err)
	}
	resp.body = []byte(`{"results":[{"status":409,"headers":{"Retry-After":"2"},"body":{"error":"held","message":"m"}}]}`)
	resp.header.Set("X-Raftlock-Leader", "n3")
	out, err := splitBatchAnswer(resp, 1)
	if err != nil || out[0].status != 409 || out[0].header.Get("Retry-After") != "2" || out[0].header.Get("X-Raftlock-Leader") != "n3" {
		t.Fatalf("split: %+v %v; want the call's status and headers with the batch's", out, err)
	}
}

// batchCallers runs a batch of first-0, first-1, ... (queued behind the
// two lone calls fillExchanges starts) whose callers, once answered, call
// again at once (second-i) when callAgain. While the batch is under way a
// call of another caller (other) queues. It returns the names of the batch
// after the first.
func batchCallers(t *testing.T, quiet, longest time.Duration, callAgain bool) []string {
	t.Helper()
	const callers = 3
	n := newBatchNode(t)
	n.batchGate, n.batchArrived = make(chan struct{}), make(chan []string, 4)
	answerBatches := sync.OnceFunc(func() { close(n.batchGate) })
	t.Cleanup(answerBatches)
	c, _ := newTestClient(t, []string{n.srv.URL})
	q := c.coalescerFor(n.srv.URL)
	setBounds := func(quiet, longest time.Duration) {
		q.mu.Lock()
		q.quiet, q.longest = quiet, longest
		q.mu.Unlock()
	}
	setBounds(quiet, longest)
	// The last exchange's wait, for callers that will not call again, ends
	// with the test.
	t.Cleanup(func() { setBounds(0, 0) })
	ctx := testenv.Context(t, 30*time.Second)
	done := fillExchanges(t, ctx, c, n.arrived)
	acquire := func(name string) error {
		l, err := c.TryAcquire(ctx, name, AcquireOptions{TTL: 10 * time.Second})
		if err == nil {
			l.Detach()
		}
		return err
	}
	errs := make(chan error, 2*callers+1)
	for i := range callers {
		go func() {
			err := acquire(fmt.Sprintf("first-%d", i))
			if err == nil && callAgain {
				err = acquire(fmt.Sprintf("second-%d", i))
			}
			errs <- err
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "the callers to queue", func() bool { return queuedCalls(c, n.srv.URL) == callers })
	close(n.gate) // the lone calls end; the queued ones go as one batch
	select {
	case names := <-n.batchArrived:
		if len(names) != callers {
			t.Fatalf("first batch %v, want the %d queued calls", names, callers)
		}
	case <-ctx.Done():
		t.Fatal("the queued calls never went")
	}
	go func() { errs <- acquire("other") }()
	testenv.WaitFor(t, 10*time.Second, "the other call to queue behind the batch", func() bool { return queuedCalls(c, n.srv.URL) == 1 })
	answerBatches()
	var next []string
	select {
	case next = <-n.batchArrived:
	case name := <-n.arrived: // a lone call: the next exchange carried it alone
		next = []string{name}
	case <-ctx.Done():
		t.Fatal("no exchange after the first batch: the call queued behind it never went")
	}
	for range coalesceInflight {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for range callers + 1 { // every caller's calls and other's answered
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return next
}

// The callers a batch just answered, calling again at once, ride the next
// batch with the call that waited for it, rather than leave it to go
// without them and follow in batches of their own.
func TestNextBatchWaitsForItsCallersToCallAgain(t *testing.T) {
	// A quiet window far past any scheduling delay: the batch leaves when
	// all three have called again, not on the clock.
	next := slices.Sorted(slices.Values(batchCallers(t, time.Minute, 2*time.Minute, true))) // the node still reads its slice
	if fmt.Sprint(next) != "[other second-0 second-1 second-2]" {
		t.Fatalf("the batch after the first carried %v, want the waiting call and every caller's next call", next)
	}
}

// Callers that do not call again hold the next batch back no longer than
// the wait's bound: the call that waited goes.
func TestNextBatchGoesWhenCallersDoNotCallAgain(t *testing.T) {
	next := batchCallers(t, time.Minute, 10*time.Millisecond, false)
	if fmt.Sprint(next) != "[other]" {
		t.Fatalf("the batch after the first carried %v, want the waiting call alone", next)
	}
}
