package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/admission"
)

// heldStore blocks every acquire (with or without a wait, as chosen) until
// released, so that a test decides how many are in flight.
type heldStore struct {
	*fakeStore
	block   func(cmd fsm.Command, wait time.Duration) bool
	entered chan string // lock names, as blocked calls enter the store
	release chan struct{}
}

func newHeldStore(block func(fsm.Command, time.Duration) bool) *heldStore {
	return &heldStore{fakeStore: newLeader("n1"), block: block, entered: make(chan string, 1024), release: make(chan struct{})}
}

func (h *heldStore) Acquire(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	if h.block(cmd, wait) {
		h.entered <- cmd.Name
		select {
		case <-h.release:
		case <-ctx.Done():
			return fsm.Result{}, ctx.Err()
		}
	}
	return h.fakeStore.Acquire(ctx, cmd, wait)
}

// fixedLimit is an admission config pinned at n.
func fixedLimit(n int) Admission {
	return Admission{Limit: admission.Config{Initial: n, Min: n, Max: n}}
}

func admissionServer(st Store, adm Admission, tokens *Tokens) (*Server, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return New(st, Options{LeaderWait: testLeaderWait, Registry: reg, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Admission: adm, Tokens: tokens}), reg
}

// inBackground sends an acquire from another goroutine; its answer comes on
// the returned channel.
func inBackground(s http.Handler, body string, hdr ...string) <-chan *httptest.ResponseRecorder {
	ch := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPost, "/v1/locks/acquire", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		ch <- rec
	}()
	return ch
}

func TestAdmissionShedsTheFloodNotTheCalmTenant(t *testing.T) {
	st := newHeldStore(func(fsm.Command, time.Duration) bool { return true })
	s, _ := admissionServer(st, fixedLimit(4), nil)
	var answers []<-chan *httptest.ResponseRecorder
	for i := range 4 {
		answers = append(answers, inBackground(s, fmt.Sprintf(`{"name":"flood/%d","ttl_ms":1000}`, i)))
		<-st.entered
	}
	// The limit is full of the flood: its next write is shed at once, with
	// Retry-After, and never reaches the store.
	calls := st.writes()
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"flood/x","ttl_ms":1000}`)
	wantError(t, rec, http.StatusTooManyRequests, "overloaded", `tenant "flood"`)
	wantRetryAfter(t, rec)
	if st.writes() != calls {
		t.Fatal("a shed write reached the store")
	}
	// The calm tenant is within its share (4/2): admitted though the node
	// is full.
	for i := range 2 {
		ch := inBackground(s, fmt.Sprintf(`{"name":"calm/%d","ttl_ms":1000}`, i))
		answers = append(answers, ch)
		select {
		case name := <-st.entered:
			if !strings.HasPrefix(name, "calm/") {
				t.Fatalf("%s entered the store, want a calm lock", name)
			}
		case rec := <-ch:
			t.Fatalf("calm tenant within its share answered %d %s", rec.Code, rec.Body)
		}
	}
	// Past its share it is shed too, like anyone over theirs.
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"calm/x","ttl_ms":1000}`), http.StatusTooManyRequests, "overloaded", `tenant "calm"`)
	close(st.release)
	for _, ch := range answers {
		if rec := <-ch; rec.Code != http.StatusOK {
			t.Fatalf("admitted acquire: %d %s", rec.Code, rec.Body)
		}
	}
	if in := s.admission.gate.InFlight(); in != 0 {
		t.Fatalf("%d writes still counted in flight after all answered", in)
	}
}

func TestAdmissionParkedWaitHoldsNoSlot(t *testing.T) {
	// Only a wait blocks: it is the parked part.
	st := newHeldStore(func(_ fsm.Command, wait time.Duration) bool { return wait > 0 })
	s, _ := admissionServer(st, fixedLimit(1), nil)
	mustAcquire(t, s, `{"name":"jobs/a","ttl_ms":10000}`)
	parked := inBackground(s, `{"name":"jobs/a","ttl_ms":10000,"wait_ms":5000}`)
	<-st.entered
	// With a limit of 1 and a waiter parked, the same tenant still writes.
	mustAcquire(t, s, `{"name":"jobs/b","ttl_ms":10000}`)
	close(st.release)
	if rec := <-parked; rec.Code != http.StatusConflict {
		t.Fatalf("parked acquire answered %d %s, want the fake's 409", rec.Code, rec.Body)
	}
}

func TestAdmissionFollowerDoesNotCount(t *testing.T) {
	f := newLeader("n2")
	f.leader = func() (string, string) { return "n1", "127.0.0.1:1" }
	s, _ := admissionServer(f, fixedLimit(1), nil)
	for range 3 {
		if tk, err := s.admit(context.Background(), "a/b", false); tk != nil || err != nil {
			t.Fatalf("a follower gated a write it will forward: %v %v", tk, err)
		}
	}
}

func TestAdmissionTenantIsTheTokenName(t *testing.T) {
	const alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
	toks, err := ParseTokens(strings.NewReader(alice + " read-write alice\n" + bob + " read-write # no name\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := newHeldStore(func(fsm.Command, time.Duration) bool { return true })
	s, reg := admissionServer(st, fixedLimit(2), toks)
	var answers []<-chan *httptest.ResponseRecorder
	for i := range 2 {
		answers = append(answers, inBackground(s, fmt.Sprintf(`{"name":"shared/%d","ttl_ms":1000}`, i), "Authorization", "Bearer "+alice))
		<-st.entered
	}
	// Same lock prefix, another token: another tenant, within its share.
	answers = append(answers, inBackground(s, `{"name":"shared/9","ttl_ms":1000}`, "Authorization", "Bearer "+bob))
	<-st.entered
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"shared/x","ttl_ms":1000}`, "Authorization", "Bearer "+alice)
	wantError(t, rec, http.StatusTooManyRequests, "overloaded", `tenant "alice"`)
	close(st.release)
	for _, ch := range answers {
		<-ch
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "raftlock_admission_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			got[labels["tenant"]+" "+labels["result"]] = m.GetCounter().GetValue()
		}
	}
	bobName := "sha256:" + hashOf(bob)[:8]
	want := map[string]float64{"alice admitted": 2, "alice shed": 1, bobName + " admitted": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("admission metrics %v, want %v", got, want)
	}
}

// slowStore's writes take longer the more are in flight, like a saturated
// commit pipeline: base up to knee in flight, in proportion beyond.
type slowStore struct {
	*fakeStore
	inflight atomic.Int64
	base     time.Duration
	knee     int64
}

func (s *slowStore) Acquire(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	d := s.base
	if n > s.knee {
		d = s.base * time.Duration(n) / time.Duration(s.knee)
	}
	time.Sleep(d) // the latency being modelled, not a wait for an event
	return s.fakeStore.Acquire(ctx, cmd, wait)
}

// A flood far past the knee brings the limit down and gets 429s, while a
// calm tenant's few writes are all admitted. Only properties are checked;
// the figures are the bench's.
func TestAdmissionAdaptsToLatencyGrowingWithConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a short flood")
	}
	st := &slowStore{fakeStore: newLeader("n1"), base: time.Millisecond, knee: 4}
	adm := Admission{Limit: admission.Config{Initial: 64, Min: 8, Max: 64, Window: 20 * time.Millisecond}}
	s, _ := admissionServer(st, adm, nil)
	// A calm phase first: the controller learns the unloaded pace.
	for i := range 40 {
		mustAcquire(t, s, fmt.Sprintf(`{"name":"calm/w%d","ttl_ms":1000}`, i))
	}
	var shed, calmShed atomic.Int64
	var wg sync.WaitGroup
	run := func(tenant string, workers, each int, count *atomic.Int64) {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					req := httptest.NewRequest(http.MethodPost, "/v1/locks/acquire",
						strings.NewReader(fmt.Sprintf(`{"name":"%s/%d-%d","ttl_ms":1000}`, tenant, w, i)))
					req.Header.Set("Content-Type", "application/json")
					rec := httptest.NewRecorder()
					s.ServeHTTP(rec, req)
					if rec.Code == http.StatusTooManyRequests {
						count.Add(1)
					}
				}
			}()
		}
	}
	run("flood", 64, 60, &shed)
	run("calm", 4, 60, &calmShed)
	wg.Wait()
	if shed.Load() == 0 {
		t.Error("a flood of 64 on a knee of 4 was never shed")
	}
	if n := calmShed.Load(); n != 0 {
		t.Errorf("the calm tenant (4 workers) was shed %d times", n)
	}
	if got := s.admission.limit.Current(); got >= 64 {
		t.Errorf("limit %d after the flood, want it below the initial 64", got)
	}
}
