package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// Lock acquires with a session or in shared mode pass both to the state
// machine, and the lease answer shows them.
func TestAcquireSessionAndShared(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		cmd        fsm.Command
		lock       fsm.Lock
		answer     string
	}{
		{"session", `{"name":"a","owner":"o","session_id":"` + sessA + `","lease_id":"` + leaseA + `"}`,
			fsm.Command{Op: fsm.OpAcquire, Name: "a", Owner: "o", LeaseID: leaseA, SessionID: sessA},
			fsm.Lock{Name: "a", Owner: "o", LeaseID: leaseA, Token: 5, TTL: 10000, SessionID: sessA},
			`{"name":"a","owner":"o","lease_id":"` + leaseA + `","fencing_token":5,"ttl_ms":10000,"session_id":"` + sessA + `"}`},
		{"shared", `{"name":"a","owner":"o","ttl_ms":2000,"mode":"shared"}`,
			fsm.Command{Op: fsm.OpAcquire, Name: "a", Owner: "o", TTL: 2000, Mode: fsm.ModeShared},
			fsm.Lock{Name: "a", Owner: "o", LeaseID: leaseA, Token: 6, TTL: 2000, Mode: fsm.ModeShared},
			`{"name":"a","owner":"o","lease_id":"` + leaseA + `","fencing_token":6,"ttl_ms":2000,"mode":"shared"}`},
		{"shared in a session", `{"name":"a","session_id":"` + sessA + `","mode":"shared","lock_delay_ms":0}`,
			fsm.Command{Op: fsm.OpAcquire, Name: "a", SessionID: sessA, Mode: fsm.ModeShared},
			fsm.Lock{Name: "a", LeaseID: leaseA, Token: 7, TTL: 10000, Mode: fsm.ModeShared, SessionID: sessA},
			`{"name":"a","owner":"","lease_id":"` + leaseA + `","fencing_token":7,"ttl_ms":10000,"session_id":"` + sessA + `","mode":"shared"}`},
		{"exclusive said aloud", `{"name":"a","ttl_ms":2000,"mode":"exclusive","lock_delay_ms":100}`,
			fsm.Command{Op: fsm.OpAcquire, Name: "a", TTL: 2000, LockDelay: 100},
			fsm.Lock{Name: "a", LeaseID: leaseA, Token: 8, TTL: 2000},
			`{"name":"a","owner":"","lease_id":"` + leaseA + `","fencing_token":8,"ttl_ms":2000}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := answering(fsm.Result{Status: fsm.StatusOK, Lock: tc.lock})
			wantJSON(t, do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", tc.body), http.StatusOK, tc.answer)
			if got := f.commands(); len(got) != 1 || !reflect.DeepEqual(got[0], tc.cmd) {
				t.Errorf("store got %+v, want [%+v]", got, tc.cmd)
			}
		})
	}
}

func TestAcquireSessionAndSharedBadRequests(t *testing.T) {
	for _, tc := range []struct{ body, msg string }{
		{`{"name":"a"}`, "ttl_ms: required (or session_id instead)"},
		{`{"name":"a","ttl_ms":null}`, "ttl_ms: required (or session_id instead)"},
		{`{"name":"a","ttl_ms":1000,"session_id":"` + sessA + `"}`, "ttl_ms: not with session_id"},
		{`{"name":"a","session_id":"not a session"}`, "session_id: must be 16 to 128"},
		{`{"name":"a","ttl_ms":1000,"mode":"read"}`, `mode: must be "exclusive" or "shared"`},
		{`{"name":"a","ttl_ms":1000,"mode":"Shared"}`, `mode: must be "exclusive" or "shared"`},
		{`{"name":"a","ttl_ms":1000,"mode":"shared","lock_delay_ms":10}`, "lock_delay_ms: not with mode \"shared\""},
		{`{"name":"a","session_id":"` + sessA + `","lock_delay_ms":10}`, "lock_delay_ms: not with session_id"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			f := newLeader("n1")
			wantError(t, do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", tc.body), http.StatusBadRequest, api.CodeBadRequest, tc.msg)
			if f.writes() != 0 {
				t.Error("a bad request reached the store")
			}
		})
	}
}

// A held answer on a lock held shared lists every holder by token, the
// first also as holder; an exclusive one keeps its old shape.
func TestAcquireHeldShared(t *testing.T) {
	readers := []fsm.Lock{
		{Name: "a", Owner: "r1", LeaseID: leaseA, Token: 4, Mode: fsm.ModeShared},
		{Name: "a", Owner: "r2", LeaseID: leaseB, Token: 6, Mode: fsm.ModeShared},
	}
	f := answering(fsm.Result{Status: fsm.StatusHeld, Holder: readers[0], Holders: readers})
	rec := do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", `{"name":"a","owner":"w","ttl_ms":1000}`)
	wantJSON(t, rec, http.StatusConflict, `{"error":"held","message":"lock \"a\" is held shared by 2 leases (lowest fencing token 4, of \"r1\")",
		"holder":{"owner":"r1","fencing_token":4},"holders":[{"owner":"r1","fencing_token":4},{"owner":"r2","fencing_token":6}],"holders_total":2}`)
	if strings.Contains(rec.Body.String(), leaseB) {
		t.Errorf("a held answer shows a lease id: %s", rec.Body)
	}

	// Holders without Holder: the first is the holder.
	f = answering(fsm.Result{Status: fsm.StatusHeld, Holders: readers[1:]})
	rec = do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`)
	wantJSON(t, rec, http.StatusConflict, `{"error":"held","message":"lock \"a\" is held shared by 1 leases (lowest fencing token 6, of \"r2\")",
		"holder":{"owner":"r2","fencing_token":6},"holders":[{"owner":"r2","fencing_token":6}],"holders_total":1}`)

	// An exclusive holder (in a session too): no holders list.
	w := fsm.Lock{Name: "a", Owner: "w", Token: 9, SessionID: sessA}
	f = answering(fsm.Result{Status: fsm.StatusHeld, Holder: w, Holders: []fsm.Lock{w}})
	rec = do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"mode":"shared"}`)
	wantJSON(t, rec, http.StatusConflict, `{"error":"held","message":"lock \"a\" is held by \"w\" (fencing token 9)","holder":{"owner":"w","fencing_token":9}}`)
	if strings.Contains(rec.Body.String(), sessA) {
		t.Errorf("a held answer shows a session id: %s", rec.Body)
	}
}

// A lock held shared by more readers than MaxErrorHolders answers held with
// the first of them and their count, not every one.
func TestAcquireHeldSharedBounded(t *testing.T) {
	var readers []fsm.Lock
	for i := range 1000 {
		readers = append(readers, fsm.Lock{Name: "a", Owner: strings.Repeat("r", api.MaxOwner), Token: uint64(10 + i), Mode: fsm.ModeShared})
	}
	rec := do(t, newServer(answering(fsm.Result{Status: fsm.StatusHeld, Holders: readers})), http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`)
	if rec.Code != http.StatusConflict {
		t.Fatalf("status %d, want 409: %s", rec.Code, rec.Body)
	}
	var e api.HeldError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Holders) != api.MaxErrorHolders || e.HoldersTotal != 1000 || e.Holders[0].FencingToken != 10 || e.Holder.FencingToken != 10 {
		t.Errorf("%d holders (first token %d), total %d; want %d, 10, 1000", len(e.Holders), e.Holders[0].FencingToken, e.HoldersTotal, api.MaxErrorHolders)
	}
	if rec.Body.Len() > 16<<10 {
		t.Errorf("a held answer of %d bytes", rec.Body.Len())
	}
}

// A lease of a session is renewed through its session: the state machine
// refuses a lock renew of it, and the answer says what to do.
func TestRenewSessionLease(t *testing.T) {
	rec := do(t, newServer(answering(fsm.Result{Status: fsm.StatusInvalid})), http.MethodPost, "/v1/locks/renew", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, "lease_id: the lease belongs to a session; renew the session")
}

// A status the state machine never gives a lock command is a server
// fault, not the client's.
func TestUnexpectedStatusIsInternal(t *testing.T) {
	rec := do(t, newServer(answering(fsm.Result{Status: fsm.StatusFull})), http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`)
	wantError(t, rec, http.StatusInternalServerError, api.CodeInternal, "full")
}

// Reads of a lock held shared show the lowest-token holder as the lock's
// holder, for clients that know no modes, and every holder; a holder in a
// session has its session's time left. Neither lease nor session ids show.
func TestReadSharedLock(t *testing.T) {
	sec := int64(time.Second)
	r := &fakeReader{
		locks: map[string][]fsm.Lock{"cfg": {
			{Name: "cfg", Owner: "r1", LeaseID: leaseA, Token: 4, TTL: 2000, Deadline: 6 * sec, Mode: fsm.ModeShared, Index: 9},
			// A session's lease: the machine shows the session's TTL and deadline.
			{Name: "cfg", Owner: "r2", LeaseID: leaseB, Token: 6, TTL: 10000, Deadline: 12 * sec, SessionID: sessA, Mode: fsm.ModeShared, Index: 9},
		}},
	}
	rec := do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/locks/cfg?stale=true", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"cfg","held":true,"owner":"r1","fencing_token":4,"ttl_ms":2000,"index":9,"mode":"shared",
		"holders":[{"owner":"r1","fencing_token":4,"ttl_ms":2000},{"owner":"r2","fencing_token":6,"ttl_ms":10000}]}`)

	lr := fakeLeaderReader{fakeReader: r, now: 5 * sec, waiters: map[string]int{"cfg": 1}}
	rec = do(t, newServer(readingLeader(lr)), http.MethodGet, "/v1/locks/cfg", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"cfg","held":true,"owner":"r1","fencing_token":4,"ttl_ms":2000,"remaining_ms":1000,"waiters":1,"index":9,"mode":"shared",
		"holders":[{"owner":"r1","fencing_token":4,"ttl_ms":2000,"remaining_ms":1000},{"owner":"r2","fencing_token":6,"ttl_ms":10000,"remaining_ms":7000}]}`)
	rec = do(t, newServer(readingLeader(lr)), http.MethodGet, "/v1/locks?prefix=c", "")
	wantJSON(t, rec, http.StatusOK, `{"locks":[{"name":"cfg","held":true,"owner":"r1","fencing_token":4,"ttl_ms":2000,"remaining_ms":1000,"waiters":1,"index":9,"mode":"shared",
		"holders":[{"owner":"r1","fencing_token":4,"ttl_ms":2000,"remaining_ms":1000},{"owner":"r2","fencing_token":6,"ttl_ms":10000,"remaining_ms":7000}]}],"truncated":false,"index":9}`)
	for _, secret := range []string{leaseA, leaseB, sessA} {
		if strings.Contains(rec.Body.String(), secret) {
			t.Errorf("a read shows a secret: %s", rec.Body)
		}
	}

	// An exclusive lock of a session: its session's time left, no mode.
	r.locks["x"] = []fsm.Lock{{Name: "x", Owner: "w", LeaseID: leaseA, Token: 11, TTL: 10000, Deadline: 12 * sec, SessionID: sessA, Index: 11}}
	rec = do(t, newServer(readingLeader(lr)), http.MethodGet, "/v1/locks/x", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"x","held":true,"owner":"w","fencing_token":11,"ttl_ms":10000,"remaining_ms":7000,"index":11}`)
}

// movingReader answers Lookup and Holders as if an entry applied between
// them: the shared hold at index 9 (Lookup's) was replaced by an exclusive
// grant at index 12 (what Holders sees). LookupHolders reads one point.
type movingReader struct{ *fakeReader }

func (r movingReader) Holders(string) []fsm.Lock {
	return []fsm.Lock{{Name: "cfg", Owner: "w", LeaseID: leaseB, Token: 12, TTL: 3000, Index: 12}}
}

// A read of a shared lock takes its holders and its index from one read of
// the state machine: before, holders read apart from the lock could show
// the exclusive holder that replaced the readers as a shared holder, under
// the readers' index.
func TestReadSharedLockReadsOnePoint(t *testing.T) {
	r := movingReader{&fakeReader{locks: map[string][]fsm.Lock{"cfg": {
		{Name: "cfg", Owner: "r1", LeaseID: leaseA, Token: 4, TTL: 2000, Mode: fsm.ModeShared, Index: 9},
		{Name: "cfg", Owner: "r2", LeaseID: sessA, Token: 6, TTL: 2000, Mode: fsm.ModeShared, Index: 9},
	}}}}
	rec := do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/locks/cfg?stale=true", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"cfg","held":true,"owner":"r1","fencing_token":4,"ttl_ms":2000,"index":9,"mode":"shared",
		"holders":[{"owner":"r1","fencing_token":4,"ttl_ms":2000},{"owner":"r2","fencing_token":6,"ttl_ms":2000}]}`)
}

// A list reads each shared lock's holders apart from the listing: the mode
// shown is the holders' own, never "shared" over an exclusive holder.
func TestListSharedLockShowsItsHoldersMode(t *testing.T) {
	r := movingReader{&fakeReader{locks: map[string][]fsm.Lock{"cfg": {
		{Name: "cfg", Owner: "r1", LeaseID: leaseA, Token: 4, TTL: 2000, Mode: fsm.ModeShared, Index: 9},
	}}}}
	rec := do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/locks?prefix=c&stale=true", "")
	wantJSON(t, rec, http.StatusOK, `{"locks":[{"name":"cfg","held":true,"owner":"w","fencing_token":12,"ttl_ms":3000,"index":9}],"truncated":false,"index":9}`)
}

// A shared hold publishes no value: value with mode "shared" is refused,
// naming the field, before anything is written.
func TestAcquireSharedWithValueRefused(t *testing.T) {
	f := answering(fsm.Result{Status: fsm.StatusOK})
	rec := do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"mode":"shared","value":"v"}`)
	wantError(t, rec, http.StatusBadRequest, "bad_request", `value: not with mode "shared"`)
	if got := f.commands(); len(got) != 0 {
		t.Fatalf("the store got %+v", got)
	}
}

// shedEarly covers the three semaphore writes as it covers lock writes
// (their bodies carry "name" and "wait_ms" too): an acquire of a tenant at
// its share is refused from the raw body, a renew or release (priority) is
// let through to admit.
func TestAdmissionShedEarlySemaphores(t *testing.T) {
	st := newHeldStore(func(_ fsm.Command, wait time.Duration) bool { return true })
	s, _ := admissionServer(st, fixedLimit(4), nil)
	var answers []<-chan *httptest.ResponseRecorder
	for i := range 4 {
		answers = append(answers, inBackground(s, fmt.Sprintf(`{"name":"flood/%d","ttl_ms":1000}`, i)))
		<-st.entered
	}
	early := func(path, body string) (*httptest.ResponseRecorder, bool) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		return rec, s.shedEarly(rec, req, []byte(body))
	}
	rec, shed := early("/v1/semaphores/acquire", `{"name":"flood/pool","limit":2,"ttl_ms":1000}`)
	if !shed {
		t.Fatal("a semaphore acquire of a tenant at its share passed shedEarly")
	}
	wantError(t, rec, http.StatusTooManyRequests, "overloaded", `tenant "flood" has 4 writes in flight, at its share of 4`)
	for _, path := range []string{"/v1/semaphores/renew", "/v1/semaphores/release"} {
		if rec, shed := early(path, `{"name":"flood/pool","lease_id":"x"}`); shed || rec.Body.Len() != 0 {
			t.Errorf("%s shed early (%d %s), want it passed: a priority write", path, rec.Code, rec.Body)
		}
	}
	close(st.release)
	for _, ch := range answers {
		<-ch
	}
}

// An update of a shared hold is refused by the state machine (invalid):
// 400 says why.
func TestUpdateSharedHoldRefused(t *testing.T) {
	f := answering(fsm.Result{Status: fsm.StatusInvalid})
	rec := do(t, newServer(f), http.MethodPost, "/v1/locks/update", `{"name":"a","lease_id":"`+leaseA+`","value":"v"}`)
	wantError(t, rec, http.StatusBadRequest, "bad_request", "a shared hold publishes no value")
}
