package client

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// newWatchClient returns a real-clock client with short backoffs: watches
// sleep between failed reads, which a fake clock would hold forever.
func newWatchClient(t *testing.T, endpoints []string) *Client {
	t.Helper()
	c, err := New(endpoints, WithBackoff(time.Millisecond, 5*time.Millisecond), WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next returns the next state from ch, failing the test after 10s.
func next[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no state within 10s")
	}
	var zero T
	return zero
}

// queries records the raw query of every read of path that a fake node got.
type queries struct {
	mu sync.Mutex
	qs []string
}

func (q *queries) add(s string) { q.mu.Lock(); q.qs = append(q.qs, s); q.mu.Unlock() }

func (q *queries) all() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.qs...)
}

func TestObserveDeliversEveryChangeInIndexOrder(t *testing.T) {
	fc := startFake(t, 1)
	c := newWatchClient(t, fc.Endpoints())
	ctx, cancel := context.WithCancel(context.Background())
	ch := c.Observe(ctx, "a", ObserveOptions{})

	if s := next(t, ch); s.Held || s.Index != 0 {
		t.Fatalf("first state %+v, want free at index 0", s)
	}
	tok := fc.hold("a", "alice", NewLeaseID())
	s := next(t, ch)
	if !s.Held || s.Owner != "alice" || s.Token != tok || s.Index != tok {
		t.Fatalf("after hold: %+v, want held by alice, token and index %d", s, tok)
	}
	idx := fc.setValue("a", "10.0.0.7:9000")
	if s = next(t, ch); s.Value != "10.0.0.7:9000" || s.Index != idx || s.Token != tok {
		t.Fatalf("after update: %+v, want value at index %d, token %d", s, idx, tok)
	}
	fc.drop("a")
	if s = next(t, ch); s.Held || s.Index <= idx {
		t.Fatalf("after drop: %+v, want free past index %d", s, idx)
	}
	cancel()
	for range ch { // closes when ctx ends
	}
}

func TestObserveDropsAnswersOlderThanDelivered(t *testing.T) {
	fc := startFake(t, 1)
	tok := fc.hold("a", "new", NewLeaseID())
	var once sync.Once
	stale := make(chan struct{})
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Method != http.MethodGet || r.URL.Query().Get("index") == "" {
			return false
		}
		answered := false
		once.Do(func() {
			// A lagging node's answer: an older holder, at an older index.
			writeJSON(w, 200, map[string]any{"name": "a", "held": true, "owner": "old", "fencing_token": tok - 5, "ttl_ms": 1000, "index": tok - 5})
			close(stale)
			answered = true
		})
		return answered
	})
	c := newWatchClient(t, fc.Endpoints())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Observe(ctx, "a", ObserveOptions{Stale: true})
	if s := next(t, ch); s.Owner != "new" || s.Index != tok {
		t.Fatalf("first state %+v, want held by new at %d", s, tok)
	}
	<-stale
	fc.drop("a")
	s := next(t, ch)
	if s.Held || s.Index <= tok {
		t.Fatalf("after the stale answer and a drop got %+v, want free past %d (never the old holder)", s, tok)
	}
}

func TestObserveResumesFromLastIndexAfterConnectionError(t *testing.T) {
	fc := startFake(t, 2)
	tok := fc.hold("a", "alice", NewLeaseID())
	var qs queries
	var drops sync.Once
	dropped := make(chan struct{})
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Method != http.MethodGet || req.Path != "/v1/locks/a" {
			return false
		}
		qs.add(n.id + "?" + r.URL.RawQuery)
		hit := false
		if r.URL.Query().Get("index") != "" {
			drops.Do(func() { hit = true; dropConnection(w); close(dropped) })
		}
		return hit
	})
	c := newWatchClient(t, fc.Endpoints())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.Observe(ctx, "a", ObserveOptions{})
	if s := next(t, ch); s.Index != tok {
		t.Fatalf("first state %+v, want index %d", s, tok)
	}
	<-dropped
	fc.setLeader("n2") // the watch must follow the leader change too
	idx := fc.setValue("a", "v2")
	if s := next(t, ch); s.Value != "v2" || s.Index != idx {
		t.Fatalf("after the dropped read: %+v, want value v2 at %d", s, idx)
	}
	all := qs.all()
	if len(all) < 3 {
		t.Fatalf("reads %v, want the first, the dropped one and a resent one", all)
	}
	want := "index=" + strconv.FormatUint(tok, 10)
	for _, q := range all[1:] {
		if !strings.Contains(q, want) {
			t.Errorf("read %q after the first does not resume from %s", q, want)
		}
	}
}

func TestObserveEndsOnPermanentError(t *testing.T) {
	fc := startFake(t, 1)
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		writeErr(w, http.StatusForbidden, "forbidden", "read-only token may not read")
		return true
	})
	c := newWatchClient(t, fc.Endpoints())
	var got error
	ch := c.Observe(context.Background(), "a", ObserveOptions{OnError: func(err error) { got = err }})
	select {
	case s, ok := <-ch:
		if ok {
			t.Fatalf("got state %+v, want the channel closed", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch still open after a 403")
	}
	if !errors.Is(got, ErrForbidden) {
		t.Fatalf("OnError got %v, want ErrForbidden", got)
	}
}

func TestObservePrefix(t *testing.T) {
	fc := startFake(t, 1)
	fc.hold("svc/a", "alice", NewLeaseID())
	fc.hold("other", "x", NewLeaseID())
	c := newWatchClient(t, fc.Endpoints())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := c.ObservePrefix(ctx, "svc/", ObserveOptions{})
	s := next(t, ch)
	if len(s.Locks) != 1 || s.Locks[0].Name != "svc/a" {
		t.Fatalf("first state %+v, want svc/a only", s)
	}
	fc.hold("other2", "y", NewLeaseID()) // outside the prefix: no report
	idx := fc.hold("svc/b", "bob", NewLeaseID())
	if s = next(t, ch); len(s.Locks) != 2 || s.Index != idx {
		t.Fatalf("after svc/b: %+v, want 2 locks at index %d", s, idx)
	}
	fc.drop("svc/a")
	if s = next(t, ch); len(s.Locks) != 1 || s.Locks[0].Name != "svc/b" || s.Index <= idx {
		t.Fatalf("after freeing svc/a: %+v", s)
	}
}
