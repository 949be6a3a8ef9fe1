package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// watchingStore is a fake that wakes parked reads on every applied command,
// as raftnode.Node does per changed lock, and counts the parked ones so a
// test changes the lock only once its read is parked.
type watchingStore struct {
	*fakeStore
	mu     sync.Mutex
	woken  chan struct{}
	parked chan string // one per Watch call: the key
}

func newWatchingStore() *watchingStore {
	return &watchingStore{fakeStore: newLeader("n1"), woken: make(chan struct{}), parked: make(chan string, 100)}
}

func (w *watchingStore) Watch(key string, prefix bool) (<-chan struct{}, func()) {
	w.mu.Lock()
	ch := w.woken
	w.mu.Unlock()
	w.parked <- key
	return ch, func() {}
}

func (w *watchingStore) Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	r, err := w.fakeStore.Apply(ctx, cmd)
	w.mu.Lock()
	close(w.woken)
	w.woken = make(chan struct{})
	w.mu.Unlock()
	return r, err
}

func (w *watchingStore) Acquire(ctx context.Context, cmd fsm.Command, _ time.Duration) (fsm.Result, error) {
	return w.Apply(ctx, cmd)
}

// testDeadline bounds what must happen "at once" or "when woken": far
// below the reads' wait_ms, so reaching it means the read did wait.
const testDeadline = 20 * time.Second

// async sends a request in the background.
func async(t *testing.T, h http.Handler, target string) <-chan *httptest.ResponseRecorder {
	t.Helper()
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		out <- rec
	}()
	return out
}

func answer(t *testing.T, ch <-chan *httptest.ResponseRecorder, what string) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case rec := <-ch:
		return rec
	case <-time.After(testDeadline):
		t.Fatalf("%s: no answer within %v", what, testDeadline)
		return nil
	}
}

func indexHeader(t *testing.T, rec *httptest.ResponseRecorder) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rec.Header().Get(api.HeaderIndex), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q: %v", api.HeaderIndex, rec.Header().Get(api.HeaderIndex), err)
	}
	return n
}

func TestBlockingReadWithCurrentIndexAnswersAfterItsWait(t *testing.T) {
	f := newWatchingStore()
	s := newServer(f.fakeStore)
	s.store = f
	l := mustAcquire(t, s, `{"name":"a","owner":"o","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
	rec := answer(t, async(t, s, "/v1/locks/a?index="+strconv.FormatUint(l.FencingToken, 10)+"&wait_ms=50"), "current index")
	wantJSON(t, rec, http.StatusOK, `{"name":"a","held":true,"owner":"o","fencing_token":1,"ttl_ms":1000,"index":1}`)
	if got := indexHeader(t, rec); got != 1 {
		t.Errorf("index header %d, want 1", got)
	}
	// A free lock never held has index 0 and can be waited on too.
	rec = answer(t, async(t, s, "/v1/locks/b?index=0&wait_ms=10"), "never held")
	wantJSON(t, rec, http.StatusOK, `{"name":"b","held":false,"index":0}`)
}

func TestBlockingReadWithOlderIndexAnswersAtOnce(t *testing.T) {
	f := newWatchingStore()
	s := newServer(f.fakeStore)
	s.store = f
	mustAcquire(t, s, `{"name":"a","owner":"o","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
	rec := answer(t, async(t, s, "/v1/locks/a?index=0&wait_ms=300000"), "older index")
	wantJSON(t, rec, http.StatusOK, `{"name":"a","held":true,"owner":"o","fencing_token":1,"ttl_ms":1000,"index":1}`)
	rec = answer(t, async(t, s, "/v1/locks?index=0&wait_ms=300000"), "older index, list")
	if got := indexHeader(t, rec); got != 1 {
		t.Errorf("list index header %d, want 1", got)
	}
}

func TestChangeWakesParkedRead(t *testing.T) {
	f := newWatchingStore()
	s := newServer(f.fakeStore)
	s.store = f
	mustAcquire(t, s, `{"name":"a","owner":"o","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
	got := async(t, s, "/v1/locks/a?index=1&wait_ms=300000")
	<-f.parked // the read is parked (or about to select on its channel)
	wantJSON(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseA+`"}`), http.StatusOK, `{"released":true}`)
	rec := answer(t, got, "woken read")
	wantJSON(t, rec, http.StatusOK, `{"name":"a","held":false,"index":2}`)
	if h := indexHeader(t, rec); h != 2 {
		t.Errorf("index header %d, want 2", h)
	}
}

func TestPrefixWatch(t *testing.T) {
	f := newWatchingStore()
	s := newServer(f.fakeStore)
	s.store = f
	mustAcquire(t, s, `{"name":"jobs/1","owner":"o","ttl_ms":1000,"lease_id":"`+leaseA+`"}`) // 1
	got := async(t, s, "/v1/locks?prefix=jobs/&index=1&wait_ms=300000")
	<-f.parked
	// A change elsewhere wakes the read, which finds nothing new under its
	// prefix and parks again.
	mustAcquire(t, s, `{"name":"other","owner":"o","ttl_ms":1000,"lease_id":"`+leaseB+`"}`) // 2
	select {
	case rec := <-got:
		t.Fatalf("answered on a change outside its prefix: %s", rec.Body)
	case <-f.parked:
	case <-time.After(testDeadline):
		t.Fatal("the woken read neither answered nor parked again")
	}
	mustAcquire(t, s, `{"name":"jobs/2","owner":"p","ttl_ms":1000,"lease_id":"`+leaseB+`"}`) // 3
	rec := answer(t, got, "prefix watch")
	var list api.LockList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if list.Index != 3 || len(list.Locks) != 2 || indexHeader(t, rec) != 3 {
		t.Fatalf("list %+v, header %s", list, rec.Header().Get(api.HeaderIndex))
	}
}

func TestBlockingReadQueryErrors(t *testing.T) {
	s := newServer(newLeader("n1"))
	for _, q := range []string{"?index=-1", "?index=x", "?index=1&wait_ms=300001", "?index=1&wait_ms=-1", "?wait_ms=10"} {
		for _, path := range []string{"/v1/locks/a", "/v1/locks"} {
			wantError(t, do(t, s, http.MethodGet, path+q, ""), http.StatusBadRequest, api.CodeBadRequest, "")
		}
	}
	// Without a Watcher the store is polled: a blocking read still ends.
	rec := answer(t, async(t, s, "/v1/locks/a?index=0&wait_ms=120"), "polled")
	wantJSON(t, rec, http.StatusOK, `{"name":"a","held":false,"index":0}`)
}
