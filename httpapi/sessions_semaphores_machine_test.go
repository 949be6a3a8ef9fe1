package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// These tests run the new endpoints against the real state machine behind
// the fake leader (no Raft): the answers are what fsm decides, end to end
// through the handlers.

// post sends body to path and decodes a 200 answer into out.
func post(t *testing.T, s http.Handler, path, body string, out any) {
	t.Helper()
	rec := do(t, s, http.MethodPost, path, body)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST %s %s: %d %s", path, body, rec.Code, rec.Body)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatal(err)
		}
	}
}

func get(t *testing.T, s http.Handler, path string, out any) {
	t.Helper()
	rec := do(t, s, http.MethodGet, path, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatal(err)
	}
}

func TestMachineSessionLifecycle(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	var sess api.Session
	post(t, s, "/v1/sessions", `{"owner":"w","ttl_ms":2000,"lock_delay_ms":1000}`, &sess)
	if !api.ValidLeaseID(sess.SessionID) || sess.TTLMs != 2000 || sess.LockDelayMs != 1000 {
		t.Fatalf("created %+v", sess)
	}
	// A retried create with the id is the same session; another owner's is refused.
	post(t, s, "/v1/sessions", fmt.Sprintf(`{"owner":"w","ttl_ms":2000,"lock_delay_ms":1000,"session_id":%q}`, sess.SessionID), nil)
	wantError(t, do(t, s, http.MethodPost, "/v1/sessions", fmt.Sprintf(`{"owner":"x","ttl_ms":2000,"session_id":%q}`, sess.SessionID)),
		http.StatusBadRequest, api.CodeBadRequest, "session_id: in use by a session of another owner")

	var a, b api.Lease
	var p api.Permit
	post(t, s, "/v1/locks/acquire", fmt.Sprintf(`{"name":"a","owner":"w","session_id":%q}`, sess.SessionID), &a)
	post(t, s, "/v1/locks/acquire", fmt.Sprintf(`{"name":"b","owner":"w","session_id":%q,"mode":"shared"}`, sess.SessionID), &b)
	post(t, s, "/v1/semaphores/acquire", fmt.Sprintf(`{"name":"a","limit":2,"owner":"w","session_id":%q}`, sess.SessionID), &p)
	if a.SessionID != sess.SessionID || a.TTLMs != 2000 || b.Mode != api.ModeShared || p.Slot != 0 || p.TTLMs != 2000 || p.SessionID != sess.SessionID {
		t.Fatalf("leases of the session: %+v %+v %+v", a, b, p)
	}
	var info api.SessionInfo
	get(t, s, "/v1/sessions/"+sess.SessionID, &info)
	want := []api.SessionLease{
		{Kind: api.LeaseKindLock, Name: "a", FencingToken: a.FencingToken},
		{Kind: api.LeaseKindLock, Name: "b", FencingToken: b.FencingToken, Mode: api.ModeShared},
		{Kind: api.LeaseKindSemaphore, Name: "a", FencingToken: p.FencingToken, Slot: new(int)},
	}
	if !reflect.DeepEqual(info.Leases, want) || info.Owner != "w" || info.Index == 0 {
		t.Errorf("session read %+v, want leases %+v", info, want)
	}
	// Its leases are renewed through the session only.
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/renew", fmt.Sprintf(`{"name":"a","lease_id":%q}`, a.LeaseID)), http.StatusBadRequest, api.CodeBadRequest, "renew the session")
	wantError(t, do(t, s, http.MethodPost, "/v1/semaphores/renew", fmt.Sprintf(`{"name":"a","lease_id":%q}`, p.LeaseID)), http.StatusBadRequest, api.CodeBadRequest, "renew the session")
	// A retry of the lease with other terms is refused, saying why.
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/acquire", fmt.Sprintf(`{"name":"a","owner":"w","ttl_ms":1000,"lease_id":%q}`, a.LeaseID)), http.StatusBadRequest, api.CodeBadRequest, "lease_id: this lease holds it on other terms")

	// Renewing the session keeps them all past their first TTL.
	f.advance(1500 * time.Millisecond)
	post(t, s, "/v1/sessions/renew", fmt.Sprintf(`{"session_id":%q}`, sess.SessionID), nil)
	f.advance(1500 * time.Millisecond)
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`), http.StatusConflict, api.CodeHeld, "")
	// Then it expires: all its leases end at once, exclusive locks into the
	// session's lock-delay.
	f.advance(500 * time.Millisecond)
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`)
	if e := wantError(t, rec, http.StatusConflict, api.CodeHeld, "lock-delay"); e.Error != api.CodeHeld {
		t.Fatal(e)
	}
	post(t, s, "/v1/locks/acquire", `{"name":"b","ttl_ms":1000}`, nil)
	post(t, s, "/v1/semaphores/acquire", `{"name":"a","limit":5,"ttl_ms":1000}`, nil)
	wantError(t, do(t, s, http.MethodPost, "/v1/sessions/renew", fmt.Sprintf(`{"session_id":%q}`, sess.SessionID)), http.StatusNotFound, api.CodeNoSession, "")
	wantError(t, do(t, s, http.MethodGet, "/v1/sessions/"+sess.SessionID, ""), http.StatusNotFound, api.CodeNoSession, "")

	// Close ends another session's leases at once, without lock-delay.
	post(t, s, "/v1/sessions", `{"owner":"v","ttl_ms":60000,"lock_delay_ms":1000}`, &sess)
	for _, name := range []string{"c", "d"} {
		post(t, s, "/v1/locks/acquire", fmt.Sprintf(`{"name":%q,"session_id":%q}`, name, sess.SessionID), nil)
	}
	var closed api.SessionClosed
	post(t, s, "/v1/sessions/close", fmt.Sprintf(`{"session_id":%q}`, sess.SessionID), &closed)
	if closed != (api.SessionClosed{Closed: true, Released: 2}) {
		t.Errorf("close: %+v", closed)
	}
	post(t, s, "/v1/locks/acquire", `{"name":"c","ttl_ms":1000}`, nil)
	wantError(t, do(t, s, http.MethodPost, "/v1/sessions/close", fmt.Sprintf(`{"session_id":%q}`, sess.SessionID)), http.StatusNotFound, api.CodeNoSession, "")
}

func TestMachineSharedLock(t *testing.T) {
	s := newServer(newLeader("n1"))
	r1 := mustAcquire(t, s, `{"name":"cfg","owner":"r1","ttl_ms":10000,"mode":"shared"}`)
	r2 := mustAcquire(t, s, `{"name":"cfg","owner":"r2","ttl_ms":10000,"mode":"shared"}`)
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"cfg","owner":"w","ttl_ms":10000}`)
	wantJSON(t, rec, http.StatusConflict, fmt.Sprintf(`{"error":"held","message":"lock \"cfg\" is held shared by 2 leases (lowest fencing token %d, of \"r1\")",
		"holder":{"owner":"r1","fencing_token":%d},"holders":[{"owner":"r1","fencing_token":%d},{"owner":"r2","fencing_token":%d}],"holders_total":2}`,
		r1.FencingToken, r1.FencingToken, r1.FencingToken, r2.FencingToken))
	// No upgrade: the reader asking exclusive is held.
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/acquire", fmt.Sprintf(`{"name":"cfg","owner":"r1","ttl_ms":10000,"lease_id":%q}`, r1.LeaseID)), http.StatusConflict, api.CodeHeld, "held shared")
	rec = do(t, s, http.MethodGet, "/v1/locks/cfg", "")
	wantJSON(t, rec, http.StatusOK, fmt.Sprintf(`{"name":"cfg","held":true,"owner":"r1","fencing_token":%d,"ttl_ms":10000,"index":%d,"mode":"shared",
		"holders":[{"owner":"r1","fencing_token":%d,"ttl_ms":10000},{"owner":"r2","fencing_token":%d,"ttl_ms":10000}]}`,
		r1.FencingToken, r2.FencingToken, r1.FencingToken, r2.FencingToken))
	post(t, s, "/v1/locks/release", fmt.Sprintf(`{"name":"cfg","lease_id":%q}`, r1.LeaseID), nil)
	post(t, s, "/v1/locks/release", fmt.Sprintf(`{"name":"cfg","lease_id":%q}`, r2.LeaseID), nil)
	w := mustAcquire(t, s, `{"name":"cfg","owner":"w","ttl_ms":10000}`)
	if w.FencingToken <= r2.FencingToken {
		t.Errorf("writer's token %d, not above the readers' %d", w.FencingToken, r2.FencingToken)
	}
}

func TestMachineSemaphore(t *testing.T) {
	s := newServer(newLeader("n1"))
	var ps [3]api.Permit
	for i := range ps {
		post(t, s, "/v1/semaphores/acquire", fmt.Sprintf(`{"name":"pool","limit":3,"owner":"w%d","ttl_ms":10000}`, i), &ps[i])
		if ps[i].Slot != i || ps[i].Limit != 3 {
			t.Fatalf("permit %d: %+v", i, ps[i])
		}
	}
	rec := do(t, s, http.MethodPost, "/v1/semaphores/acquire", `{"name":"pool","limit":3,"owner":"w3","ttl_ms":10000}`)
	wantJSON(t, rec, http.StatusConflict, fmt.Sprintf(`{"error":"full","message":"semaphore \"pool\" is full: all 3 permits are held","holders":[
		{"owner":"w0","slot":0,"fencing_token":%d},{"owner":"w1","slot":1,"fencing_token":%d},{"owner":"w2","slot":2,"fencing_token":%d}],"holders_total":3}`,
		ps[0].FencingToken, ps[1].FencingToken, ps[2].FencingToken))
	rec = do(t, s, http.MethodPost, "/v1/semaphores/acquire", `{"name":"pool","limit":4,"ttl_ms":10000}`)
	wantJSON(t, rec, http.StatusConflict, `{"error":"limit_mismatch","message":"limit: semaphore \"pool\" is held with limit 3, not 4","limit":3}`)

	// A retry with the lease id: the same slot and token.
	var again api.Permit
	post(t, s, "/v1/semaphores/acquire", fmt.Sprintf(`{"name":"pool","limit":3,"owner":"w1","ttl_ms":10000,"lease_id":%q}`, ps[1].LeaseID), &again)
	if again != ps[1] {
		t.Errorf("retried acquire %+v, want %+v", again, ps[1])
	}
	post(t, s, "/v1/semaphores/renew", fmt.Sprintf(`{"name":"pool","lease_id":%q,"ttl_ms":20000}`, ps[1].LeaseID), &again)
	if again.TTLMs != 20000 || again.FencingToken != ps[1].FencingToken {
		t.Errorf("renewed %+v", again)
	}
	post(t, s, "/v1/semaphores/release", fmt.Sprintf(`{"name":"pool","lease_id":%q}`, ps[1].LeaseID), nil)
	wantError(t, do(t, s, http.MethodPost, "/v1/semaphores/release", fmt.Sprintf(`{"name":"pool","lease_id":%q}`, ps[1].LeaseID)), http.StatusConflict, api.CodeNotHolder, "")
	var fourth api.Permit
	post(t, s, "/v1/semaphores/acquire", `{"name":"pool","limit":3,"owner":"w3","ttl_ms":10000}`, &fourth)
	if fourth.Slot != 1 || fourth.FencingToken <= ps[2].FencingToken {
		t.Errorf("the freed slot: %+v, want slot 1 with a token above %d", fourth, ps[2].FencingToken)
	}
	var sem api.Semaphore
	get(t, s, "/v1/semaphores/pool", &sem)
	if sem.Limit != 3 || len(sem.Holders) != 3 || sem.Holders[1].Owner != "w3" || sem.Holders[1].Slot != 1 || sem.Index != fourth.FencingToken {
		t.Errorf("semaphore read %+v", sem)
	}
	// A lock of the same name is another thing.
	mustAcquire(t, s, `{"name":"pool","ttl_ms":1000}`)
}

// BenchmarkSessionRead reads a full session (MaxLeasesPerSession leases)
// through the handler: the cost of GET /v1/sessions/{id} at its largest.
func BenchmarkSessionRead(b *testing.B) {
	f := newLeader("n1")
	s := newServer(f)
	t := &testing.T{}
	var sess api.Session
	post(t, s, "/v1/sessions", `{"owner":"bench","ttl_ms":600000}`, &sess)
	for i := range api.MaxLeasesPerSession {
		res := f.applyLocal(fsm.Command{Op: fsm.OpAcquire, Name: fmt.Sprintf("bench/%04d", i), SessionID: sess.SessionID})
		if res.Status != fsm.StatusOK {
			b.Fatalf("acquire %d: %v", i, res.Status)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		rec := do(t, s, http.MethodGet, "/v1/sessions/"+sess.SessionID, "")
		if rec.Code != http.StatusOK {
			b.Fatalf("read: %d", rec.Code)
		}
	}
}
