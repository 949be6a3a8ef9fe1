package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

func TestSemaphoreAcquire(t *testing.T) {
	permit := fsm.Lock{Name: "pool/a", Owner: "worker-a", LeaseID: leaseA, Token: 12, TTL: 10000, Slot: 0, Limit: 3}
	f := answering(fsm.Result{Status: fsm.StatusOK, Lock: permit})
	rec := do(t, newServer(f), http.MethodPost, "/v1/semaphores/acquire", `{"name":"pool/a","limit":3,"owner":"worker-a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"name":"pool/a","owner":"worker-a","lease_id":"`+leaseA+`","slot":0,"fencing_token":12,"limit":3,"ttl_ms":10000}`)
	want := fsm.Command{Op: fsm.OpSemAcquire, Name: "pool/a", Limit: 3, Owner: "worker-a", LeaseID: leaseA, TTL: 10000}
	if got := f.commands(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("store got %+v, want [%+v]", got, want)
	}

	// In a session: no TTL of its own, the session's reported.
	permit.SessionID, permit.Slot = sessA, 2
	f = answering(fsm.Result{Status: fsm.StatusOK, Lock: permit})
	rec = do(t, newServer(f), http.MethodPost, "/v1/semaphores/acquire", `{"name":"pool/a","limit":3,"owner":"worker-a","session_id":"`+sessA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"name":"pool/a","owner":"worker-a","lease_id":"`+leaseA+`","slot":2,"fencing_token":12,"limit":3,"ttl_ms":10000,"session_id":"`+sessA+`"}`)
	want = fsm.Command{Op: fsm.OpSemAcquire, Name: "pool/a", Limit: 3, Owner: "worker-a", SessionID: sessA}
	if got := f.commands(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("store got %+v, want [%+v]", got, want)
	}
}

func TestSemaphoreFullAndLimitMismatch(t *testing.T) {
	f := answering(fsm.Result{Status: fsm.StatusFull, Holders: []fsm.Lock{
		{Name: "pool/a", Owner: "w0", LeaseID: leaseA, Token: 10, Slot: 0, Limit: 2},
		{Name: "pool/a", Owner: "w1", LeaseID: leaseB, Token: 11, Slot: 1, Limit: 2},
	}})
	rec := do(t, newServer(f), http.MethodPost, "/v1/semaphores/acquire", `{"name":"pool/a","limit":2,"ttl_ms":1000}`)
	wantJSON(t, rec, http.StatusConflict, `{"error":"full","message":"semaphore \"pool/a\" is full: all 2 permits are held",
		"holders":[{"owner":"w0","slot":0,"fencing_token":10},{"owner":"w1","slot":1,"fencing_token":11}],"holders_total":2}`)
	if strings.Contains(rec.Body.String(), leaseA) {
		t.Errorf("a full answer shows a lease id: %s", rec.Body)
	}

	f = answering(fsm.Result{Status: fsm.StatusLimitMismatch, Limit: 5})
	rec = do(t, newServer(f), http.MethodPost, "/v1/semaphores/acquire", `{"name":"pool/a","limit":2,"ttl_ms":1000}`)
	wantJSON(t, rec, http.StatusConflict, `{"error":"limit_mismatch","message":"limit: semaphore \"pool/a\" is held with limit 5, not 2","limit":5}`)
}

// A full semaphore of the largest limit, every owner as long as allowed,
// answers with its first MaxErrorHolders holders and their count: a few
// kilobytes, where listing all 1,024 made every refused acquire ~300 KB.
// Through a real state machine, so the holders come as the fsm lists them.
func TestSemaphoreFullBounded(t *testing.T) {
	f := newLeader("n1")
	h := newServer(f)
	owner := strings.Repeat("o", api.MaxOwner)
	for i := range api.MaxSemaphoreLimit {
		rec := do(t, h, http.MethodPost, "/v1/semaphores/acquire", fmt.Sprintf(`{"name":"pool","limit":%d,"owner":"%s","ttl_ms":60000}`, api.MaxSemaphoreLimit, owner))
		if rec.Code != http.StatusOK {
			t.Fatalf("permit %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := do(t, h, http.MethodPost, "/v1/semaphores/acquire", fmt.Sprintf(`{"name":"pool","limit":%d,"ttl_ms":60000}`, api.MaxSemaphoreLimit))
	if rec.Code != http.StatusConflict {
		t.Fatalf("status %d, want 409: %s", rec.Code, rec.Body)
	}
	var e api.FullError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	if e.Error != api.CodeFull || len(e.Holders) != api.MaxErrorHolders || e.HoldersTotal != api.MaxSemaphoreLimit {
		t.Errorf("%s with %d holders, total %d; want full, %d, %d", e.Error, len(e.Holders), e.HoldersTotal, api.MaxErrorHolders, api.MaxSemaphoreLimit)
	}
	for i, hd := range e.Holders {
		if hd.Slot != i {
			t.Errorf("holder %d has slot %d: the first holders by slot are listed", i, hd.Slot)
		}
	}
	if !strings.Contains(e.Message, "all 1024 permits") {
		t.Errorf("message %q does not count every permit", e.Message)
	}
	if rec.Body.Len() > 16<<10 {
		t.Errorf("a full answer of %d bytes", rec.Body.Len())
	}
	t.Logf("full answer: %d bytes", rec.Body.Len())
}

// A wait goes to the store, which parks the acquire while the semaphore
// is full: at once with admission off, after an admitted try without
// waiting that found it full with admission on.
func TestSemaphoreAcquirePassesWait(t *testing.T) {
	full := fsm.Result{Status: fsm.StatusFull, Holders: []fsm.Lock{{Owner: "w0", Token: 10, Limit: 1}}}
	for _, tc := range []struct {
		name  string
		opts  Options
		waits []time.Duration
	}{
		{"admission off", Options{Admission: Admission{Disabled: true}}, []time.Duration{1500 * time.Millisecond}},
		{"admission on", Options{}, []time.Duration{0, 1500 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := answering(full)
			tc.opts.LeaderWait, tc.opts.Metrics = testLeaderWait, http.NotFoundHandler()
			rec := do(t, New(f, tc.opts), http.MethodPost, "/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":1000,"wait_ms":1500}`)
			wantError(t, rec, http.StatusConflict, api.CodeFull, "full")
			if !reflect.DeepEqual(f.waits, tc.waits) {
				t.Errorf("store got waits %v, want %v", f.waits, tc.waits)
			}
		})
	}
	// A grant on the try needs no wait.
	f := answering(fsm.Result{Status: fsm.StatusOK, Lock: fsm.Lock{Name: "a", LeaseID: leaseA, Token: 3, TTL: 1000, Limit: 1}})
	do(t, newServer(f), http.MethodPost, "/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":1000,"wait_ms":1500}`)
	if !reflect.DeepEqual(f.waits, []time.Duration{0}) {
		t.Errorf("store got waits %v, want [0s]", f.waits)
	}
}

func TestSemaphoreRenewAndRelease(t *testing.T) {
	permit := fsm.Lock{Name: "pool/a", Owner: "worker-a", LeaseID: leaseA, Token: 12, TTL: 20000, Slot: 1, Limit: 3}
	f := answering(fsm.Result{Status: fsm.StatusOK, Lock: permit})
	s := newServer(f)
	rec := do(t, s, http.MethodPost, "/v1/semaphores/renew", `{"name":"pool/a","lease_id":"`+leaseA+`","ttl_ms":20000}`)
	wantJSON(t, rec, http.StatusOK, `{"name":"pool/a","owner":"worker-a","lease_id":"`+leaseA+`","slot":1,"fencing_token":12,"limit":3,"ttl_ms":20000}`)
	rec = do(t, s, http.MethodPost, "/v1/semaphores/release", `{"name":"pool/a","lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"released":true}`)
	want := []fsm.Command{
		{Op: fsm.OpSemRenew, Name: "pool/a", LeaseID: leaseA, TTL: 20000},
		{Op: fsm.OpSemRelease, Name: "pool/a", LeaseID: leaseA},
	}
	if got := f.commands(); !reflect.DeepEqual(got, want) {
		t.Errorf("store got %+v, want %+v", got, want)
	}

	s = newServer(answering(fsm.Result{Status: fsm.StatusNotHolder}))
	for _, path := range []string{"/v1/semaphores/renew", "/v1/semaphores/release"} {
		rec := do(t, s, http.MethodPost, path, `{"name":"pool/a","lease_id":"`+leaseA+`"}`)
		wantError(t, rec, http.StatusConflict, api.CodeNotHolder, `holds no permit of semaphore "pool/a"`)
	}
	// A permit of a session is renewed through its session.
	rec = do(t, newServer(answering(fsm.Result{Status: fsm.StatusInvalid})), http.MethodPost, "/v1/semaphores/renew", `{"name":"pool/a","lease_id":"`+leaseA+`"}`)
	wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, "renew the session")
}

// Bad semaphore requests are 400 naming the field, before the store.
func TestSemaphoreBadRequests(t *testing.T) {
	for _, tc := range []struct{ path, body, msg string }{
		{"/v1/semaphores/acquire", `{"name":"a","ttl_ms":1000}`, "limit: must be between 1 and 1024"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":0,"ttl_ms":1000}`, "limit: must be between 1 and 1024"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1025,"ttl_ms":1000}`, "limit: must be between 1 and 1024"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1.5,"ttl_ms":1000}`, "limit: must be an integer, not number 1.5"},
		{"/v1/semaphores/acquire", `{"name":"","limit":1,"ttl_ms":1000}`, "name: must be 1 to 512 bytes"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1}`, "ttl_ms: required (or session_id instead)"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":1000,"session_id":"` + sessA + `"}`, "ttl_ms: not with session_id"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1,"session_id":"bad"}`, "session_id: must be 16 to 128"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":100}`, "ttl_ms: must be between 500"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":1000,"lock_delay_ms":0}`, "lock_delay_ms: semaphores have no lock-delay"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":1000,"wait_ms":300001}`, "wait_ms: must be between 0 and 300000"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":1000,"lease_id":"x"}`, "lease_id: must be 16 to 128"},
		{"/v1/semaphores/acquire", `{"name":"a","limit":1,"ttl_ms":1000,"mode":"shared"}`, `unknown field "mode"`},
		{"/v1/semaphores/renew", `{"name":"a"}`, "lease_id: must be 16 to 128"},
		{"/v1/semaphores/renew", `{"name":"a","lease_id":"` + leaseA + `","ttl_ms":3600001}`, "ttl_ms: must be between 500"},
		{"/v1/semaphores/release", `{"lease_id":"` + leaseA + `"}`, "name: must be 1 to 512 bytes"},
		{"/v1/semaphores/release", `{"name":"a","lease_id":"` + leaseA + `","force":true}`, `unknown field "force"`},
	} {
		t.Run(tc.path+tc.body, func(t *testing.T) {
			f := newLeader("n1")
			wantError(t, do(t, newServer(f), http.MethodPost, tc.path, tc.body), http.StatusBadRequest, api.CodeBadRequest, tc.msg)
			if f.writes() != 0 {
				t.Error("a bad request reached the store")
			}
		})
	}
}

func TestGetSemaphore(t *testing.T) {
	sec := int64(time.Second)
	r := &fakeReader{
		sems: map[string]fsm.Semaphore{"pool/a": {Name: "pool/a", Limit: 3, Index: 21, Holders: []fsm.Lock{
			{Name: "pool/a", Owner: "w0", LeaseID: leaseA, Token: 15, TTL: 10000, Deadline: 7 * sec, Slot: 0, Limit: 3},
			// A session's permit: the machine shows the session's TTL and deadline.
			{Name: "pool/a", Owner: "w2", LeaseID: leaseB, Token: 21, TTL: 20000, Deadline: 30 * sec, SessionID: sessA, Slot: 2, Limit: 3},
		}}},
	}
	// A follower's (or stale) view.
	rec := do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/semaphores/pool%2Fa", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"pool/a","limit":3,"index":21,"holders":[
		{"owner":"w0","slot":0,"fencing_token":15,"ttl_ms":10000},
		{"owner":"w2","slot":2,"fencing_token":21,"ttl_ms":20000}]}`)
	if rec.Header().Get(api.HeaderIndex) != "21" {
		t.Errorf("%s %q, want 21", api.HeaderIndex, rec.Header().Get(api.HeaderIndex))
	}
	if strings.Contains(rec.Body.String(), leaseA) || strings.Contains(rec.Body.String(), sessA) {
		t.Errorf("a semaphore read shows a secret: %s", rec.Body)
	}
	// The leader's view: time left (a session's permit: its session's) and
	// parked acquires.
	lr := fakeLeaderReader{fakeReader: r, now: 5 * sec, semWaiters: map[string]int{"pool/a": 2}, waiters: map[string]int{"pool/a": 9}}
	rec = do(t, newServer(readingLeader(lr)), http.MethodGet, "/v1/semaphores/pool/a", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"pool/a","limit":3,"index":21,"waiters":2,"holders":[
		{"owner":"w0","slot":0,"fencing_token":15,"ttl_ms":10000,"remaining_ms":2000},
		{"owner":"w2","slot":2,"fencing_token":21,"ttl_ms":20000,"remaining_ms":25000}]}`)

	// Nobody holding: 200, limit 0, no holders.
	rec = do(t, newServer(readingLeader(lr)), http.MethodGet, "/v1/semaphores/other", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"other","limit":0,"holders":[],"index":0}`)

	wantError(t, do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/semaphores/a%01", ""), http.StatusBadRequest, api.CodeBadRequest, "name: must not contain control characters")
	wantError(t, do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/semaphores/a?index=0", ""), http.StatusBadRequest, api.CodeBadRequest, "index: blocking reads are for locks only")
}

// Metrics count the new routes by template: never by semaphore name or
// session id, which would grow without bound (and the id is a secret).
func TestIssue15RouteLabels(t *testing.T) {
	f := readingLeader(&fakeReader{})
	s := New(f, Options{LeaderWait: testLeaderWait})
	do(t, s, http.MethodGet, "/v1/semaphores/pool/secret-name", "")
	do(t, s, http.MethodGet, "/v1/sessions/"+sessA, "")
	f.apply = func(context.Context, fsm.Command) (fsm.Result, error) {
		return fsm.Result{Status: fsm.StatusNoSession}, nil
	}
	do(t, s, http.MethodPost, "/v1/sessions/renew", `{"session_id":"`+sessA+`"}`)
	body := do(t, s, http.MethodGet, "/metrics", "").Body.String()
	for _, want := range []string{
		`raftlock_http_requests_total{code="200",method="GET",route="/v1/semaphores/{name:.+}"} 1`,
		`raftlock_http_requests_total{code="404",method="GET",route="/v1/sessions/{id}"} 1`,
		`raftlock_http_requests_total{code="404",method="POST",route="/v1/sessions/renew"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, "secret-name") || strings.Contains(body, sessA) {
		t.Error("a semaphore name or session id is in the metrics")
	}
}
