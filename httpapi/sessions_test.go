package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

const sessA = "session-A_0123456789"

// answering is a leader whose store answers every command with res.
func answering(res fsm.Result) *fakeStore {
	f := newLeader("n1")
	f.apply = func(context.Context, fsm.Command) (fsm.Result, error) { return res, nil }
	return f
}

func TestSessionCreate(t *testing.T) {
	f := answering(fsm.Result{Status: fsm.StatusOK, Session: fsm.Session{ID: sessA, Owner: "worker-a", TTL: 10000, LockDelay: 250, Index: 7}})
	rec := do(t, newServer(f), http.MethodPost, "/v1/sessions", `{"owner":"worker-a","ttl_ms":10000,"lock_delay_ms":250,"session_id":"`+sessA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"session_id":"`+sessA+`","owner":"worker-a","ttl_ms":10000,"lock_delay_ms":250}`)
	want := fsm.Command{Op: fsm.OpSessionCreate, SessionID: sessA, Owner: "worker-a", TTL: 10000, LockDelay: 250}
	if got := f.commands(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("store got %+v, want [%+v]", got, want)
	}

	// Without an id the leader makes one: the handler passes none.
	f = answering(fsm.Result{Status: fsm.StatusOK, Session: fsm.Session{ID: sessA, TTL: 500}})
	rec = do(t, newServer(f), http.MethodPost, "/v1/sessions", `{"ttl_ms":500}`)
	wantJSON(t, rec, http.StatusOK, `{"session_id":"`+sessA+`","owner":"","ttl_ms":500,"lock_delay_ms":0}`)
	if got := f.commands()[0]; got.SessionID != "" || got.Op != fsm.OpSessionCreate {
		t.Errorf("store got %+v: the session id is the leader's to make", got)
	}

	// The same id with another owner: the state machine refuses it.
	f = answering(fsm.Result{Status: fsm.StatusInvalid})
	rec = do(t, newServer(f), http.MethodPost, "/v1/sessions", `{"owner":"worker-b","ttl_ms":10000,"session_id":"`+sessA+`"}`)
	wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, "session_id: in use by a session of another owner, ttl_ms or lock_delay_ms (session exists with other terms)")
}

// A create retried with the id and owner of a live session but another
// ttl_ms or lock_delay_ms is 400 and leaves the session as it was; the
// same terms again are the same session.
func TestSessionCreateWithOtherTermsIs400(t *testing.T) {
	s := newServer(newLeader("n1"))
	var sess api.Session
	post(t, s, "/v1/sessions", `{"owner":"w","ttl_ms":60000,"lock_delay_ms":5000}`, &sess)
	for _, body := range []string{
		`{"owner":"w","ttl_ms":1000,"lock_delay_ms":5000,"session_id":%q}`,
		`{"owner":"w","ttl_ms":60000,"session_id":%q}`,
	} {
		wantError(t, do(t, s, http.MethodPost, "/v1/sessions", fmt.Sprintf(body, sess.SessionID)),
			http.StatusBadRequest, api.CodeBadRequest, "session exists with other terms")
	}
	var again api.Session
	post(t, s, "/v1/sessions", fmt.Sprintf(`{"owner":"w","ttl_ms":60000,"lock_delay_ms":5000,"session_id":%q}`, sess.SessionID), &again)
	if again != sess {
		t.Fatalf("same-terms retry: %+v, first %+v", again, sess)
	}
}

func TestSessionRenewAndClose(t *testing.T) {
	f := answering(fsm.Result{Status: fsm.StatusOK, Session: fsm.Session{ID: sessA, Owner: "o", TTL: 20000}, Ended: 3})
	s := newServer(f)
	rec := do(t, s, http.MethodPost, "/v1/sessions/renew", `{"session_id":"`+sessA+`","ttl_ms":20000}`)
	wantJSON(t, rec, http.StatusOK, `{"session_id":"`+sessA+`","owner":"o","ttl_ms":20000,"lock_delay_ms":0}`)
	rec = do(t, s, http.MethodPost, "/v1/sessions/renew", `{"session_id":"`+sessA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"session_id":"`+sessA+`","owner":"o","ttl_ms":20000,"lock_delay_ms":0}`)
	rec = do(t, s, http.MethodPost, "/v1/sessions/close", `{"session_id":"`+sessA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"closed":true,"released":3}`)
	want := []fsm.Command{
		{Op: fsm.OpSessionRenew, SessionID: sessA, TTL: 20000},
		{Op: fsm.OpSessionRenew, SessionID: sessA}, // TTL 0 keeps it
		{Op: fsm.OpSessionClose, SessionID: sessA},
	}
	if got := f.commands(); !reflect.DeepEqual(got, want) {
		t.Errorf("store got %+v, want %+v", got, want)
	}
}

// An unknown or ended session is 404 no_session for every session write
// and for acquires made with it.
func TestNoSession(t *testing.T) {
	for _, w := range []struct{ path, body string }{
		{"/v1/sessions/renew", `{"session_id":"` + sessA + `"}`},
		{"/v1/sessions/close", `{"session_id":"` + sessA + `"}`},
		{"/v1/locks/acquire", `{"name":"a","session_id":"` + sessA + `"}`},
		{"/v1/semaphores/acquire", `{"name":"a","limit":2,"session_id":"` + sessA + `"}`},
	} {
		t.Run(w.path, func(t *testing.T) {
			rec := do(t, newServer(answering(fsm.Result{Status: fsm.StatusNoSession})), http.MethodPost, w.path, w.body)
			wantError(t, rec, http.StatusNotFound, api.CodeNoSession, "session_id: no such session")
		})
	}
}

func TestSessionFull(t *testing.T) {
	for _, w := range []struct{ path, body string }{
		{"/v1/locks/acquire", `{"name":"a","session_id":"` + sessA + `"}`},
		{"/v1/semaphores/acquire", `{"name":"a","limit":2,"session_id":"` + sessA + `"}`},
	} {
		rec := do(t, newServer(answering(fsm.Result{Status: fsm.StatusSessionFull})), http.MethodPost, w.path, w.body)
		wantError(t, rec, http.StatusConflict, api.CodeSessionFull, "4096 leases")
	}
	if api.MaxLeasesPerSession != fsm.MaxLeasesPerSession || api.MaxSemaphoreLimit != fsm.MaxSemaphoreLimit {
		t.Errorf("api and fsm disagree on the bounds: %d/%d leases a session, %d/%d permits",
			api.MaxLeasesPerSession, fsm.MaxLeasesPerSession, api.MaxSemaphoreLimit, fsm.MaxSemaphoreLimit)
	}
}

// Bad session requests are 400 naming the field, before the store.
func TestSessionBadRequests(t *testing.T) {
	for _, tc := range []struct{ path, body, msg string }{
		{"/v1/sessions", `{"owner":"o"}`, "ttl_ms: must be between 500"},
		{"/v1/sessions", `{"ttl_ms":499}`, "ttl_ms: must be between 500"},
		{"/v1/sessions", `{"ttl_ms":3600001}`, "ttl_ms: must be between 500"},
		{"/v1/sessions", `{"ttl_ms":1000,"lock_delay_ms":60001}`, "lock_delay_ms: must be between 0 and 60000"},
		{"/v1/sessions", `{"ttl_ms":1000,"session_id":"short"}`, "session_id: must be 16 to 128"},
		{"/v1/sessions", `{"ttl_ms":1000,"owner":"` + strings.Repeat("o", api.MaxOwner+1) + `"}`, "owner: must be at most 256"},
		{"/v1/sessions", `{"ttl_ms":1000,"ttl":1000}`, `unknown field "ttl"`},
		{"/v1/sessions", `{"ttl_ms":1000,"Owner":"o"}`, `unknown field "Owner"`},
		{"/v1/sessions/renew", `{}`, "session_id: must be 16 to 128"},
		{"/v1/sessions/renew", `{"session_id":"` + sessA + `","ttl_ms":100}`, "ttl_ms: must be between 500"},
		{"/v1/sessions/close", `{"session_id":"` + sessA + `=="}`, "session_id: must be 16 to 128"},
		{"/v1/sessions/close", `{"session_id":"` + sessA + `","ttl_ms":1000}`, `unknown field "ttl_ms"`},
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

func TestGetSession(t *testing.T) {
	sec := int64(time.Second)
	r := &fakeReader{sessions: map[string]fsm.Session{sessA: {ID: sessA, Owner: "worker-a", TTL: 10000, LockDelay: 250, Deadline: 9 * sec, Index: 12,
		Leases: []fsm.Lock{
			{Name: "a", LeaseID: leaseA, Token: 13, SessionID: sessA, TTL: 10000},
			{Name: "b", LeaseID: leaseB, Token: 14, SessionID: sessA, TTL: 10000, Mode: fsm.ModeShared},
			{Name: "a", LeaseID: "lease-C_0123456789", Token: 15, SessionID: sessA, TTL: 10000, Slot: 0, Limit: 3},
		}}}}
	full := `{"session_id":"` + sessA + `","owner":"worker-a","ttl_ms":10000,"lock_delay_ms":250,%s"index":12,"leases":[
		{"kind":"lock","name":"a","fencing_token":13},
		{"kind":"lock","name":"b","fencing_token":14,"mode":"shared"},
		{"kind":"semaphore","name":"a","fencing_token":15,"slot":0}]}`

	// A follower's (or stale) view: no time left.
	rec := do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/sessions/"+sessA, "")
	wantJSON(t, rec, http.StatusOK, strings.Replace(full, "%s", "", 1))
	if rec.Header().Get(api.HeaderIndex) != "12" {
		t.Errorf("%s %q, want 12", api.HeaderIndex, rec.Header().Get(api.HeaderIndex))
	}
	if strings.Contains(rec.Body.String(), leaseA) {
		t.Errorf("a session read shows a lease id: %s", rec.Body)
	}
	// The leader's view: the session's time left.
	rec = do(t, newServer(readingLeader(fakeLeaderReader{fakeReader: r, now: 5 * sec})), http.MethodGet, "/v1/sessions/"+sessA+"?stale=false", "")
	wantJSON(t, rec, http.StatusOK, strings.Replace(full, "%s", `"remaining_ms":4000,`, 1))

	// Unknown or ended, a malformed id, a blocking read: refused.
	wantError(t, do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/sessions/"+strings.Repeat("z", 20), ""), http.StatusNotFound, api.CodeNoSession, "no such session")
	wantError(t, do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/sessions/short", ""), http.StatusBadRequest, api.CodeBadRequest, "id: must be 16 to 128")
	wantError(t, do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/sessions/"+sessA+"?index=3", ""), http.StatusBadRequest, api.CodeBadRequest, "index: blocking reads are for locks only")
	wantError(t, do(t, newServer(readingLeader(r)), http.MethodGet, "/v1/sessions/"+sessA+"?stale=maybe", ""), http.StatusBadRequest, api.CodeBadRequest, "stale:")
}

// Reads of sessions and semaphores are linearizable unless stale=true, as
// lock reads are.
func TestSessionAndSemaphoreReadsAskLinearizable(t *testing.T) {
	f := readingLeader(&fakeReader{})
	s := newServer(f)
	do(t, s, http.MethodGet, "/v1/semaphores/a", "")
	do(t, s, http.MethodGet, "/v1/semaphores/a?stale=true", "")
	do(t, s, http.MethodGet, "/v1/sessions/"+sessA, "")
	do(t, s, http.MethodGet, "/v1/sessions/"+sessA+"?stale=true", "")
	if !reflect.DeepEqual(f.stales, []bool{false, true, false, true}) {
		t.Errorf("reads asked the store for stale %v, want [false true false true]", f.stales)
	}
}

// Every new write is refused 503 not_supported_yet, with Retry-After,
// while some node does not read command format 5.
func TestNewWritesNotSupportedYet(t *testing.T) {
	for _, w := range issue15Writes {
		t.Run(w.path, func(t *testing.T) {
			f := failingStore(nodeapi.ErrNotSupportedYet, "n2")
			rec := do(t, newServer(f), http.MethodPost, w.path, w.body)
			wantError(t, rec, http.StatusServiceUnavailable, api.CodeNotSupportedYet, "")
			wantRetryAfter(t, rec)
		})
	}
}
