package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv"
)

// apiClient sends JSON to one node of a test cluster.
type apiClient struct {
	t    *testing.T
	hc   *http.Client
	base string
}

// send sends one request, resent as the contract lets a client, so that a
// leader change under load does not fail the test: after a 503 no_leader
// or not_supported_yet (nothing applied; a new leader surveys its members'
// command versions before it writes format 5 again) and after a 504 unknown_outcome (the tests give every
// write that makes a lease or session its id, so the resend is the same
// request). after504 reports that an earlier attempt's outcome was unknown:
// then a release's not_holder or a close's no_session means it took.
func (c apiClient) send(method, path, body string) (st int, b []byte, after504 bool) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, b = c.once(method, path, body)
		retry := st == http.StatusServiceUnavailable && (strings.Contains(string(b), api.CodeNoLeader) || strings.Contains(string(b), api.CodeNotSupportedYet)) ||
			st == http.StatusGatewayTimeout && strings.Contains(string(b), api.CodeUnknownOutcome)
		if !retry || time.Now().After(deadline) {
			return st, b, after504
		}
		after504 = after504 || st == http.StatusGatewayTimeout
		time.Sleep(20 * time.Millisecond)
	}
}

func (c apiClient) do(method, path, body string) (int, []byte) {
	c.t.Helper()
	st, b, _ := c.send(method, path, body)
	return st, b
}

func (c apiClient) once(method, path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// must sends a request that must answer want, and decodes the body into
// out. It reports false, with out untouched, when an attempt whose outcome
// was unknown did the release or close (see send).
func (c apiClient) must(want int, method, path, body string, out any) bool {
	c.t.Helper()
	st, b, after504 := c.send(method, path, body)
	if after504 && (st == http.StatusConflict && strings.HasSuffix(path, "/release") ||
		st == http.StatusNotFound && path == "/v1/sessions/close") {
		return false
	}
	if st != want {
		c.t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, st, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return true
}

// wantCode sends a request that must fail with status and error code.
func (c apiClient) wantCode(status int, code, method, path, body string) []byte {
	c.t.Helper()
	st, b := c.do(method, path, body)
	var e api.Error
	_ = json.Unmarshal(b, &e)
	if st != status || e.Error != code {
		c.t.Fatalf("%s %s %s: %d %s, want %d %s", method, path, body, st, b, status, code)
	}
	return b
}

// format5 waits until the cluster writes command format 5: until then the
// leader answers new writes 503 not_supported_yet (its survey of the
// members' command versions runs after each election).
func format5(t *testing.T, c apiClient, nudge func()) api.Session {
	t.Helper()
	var s api.Session
	testenv.WaitFor(t, 20*time.Second, "a session create (command format 5)", func() bool {
		nudge()
		st, b := c.do("POST", "/v1/sessions", `{"owner":"probe","ttl_ms":600000}`)
		if st == http.StatusServiceUnavailable && strings.Contains(string(b), api.CodeNotSupportedYet) {
			return false
		}
		if st != http.StatusOK {
			t.Fatalf("session create: %d %s", st, b)
		}
		return json.Unmarshal(b, &s) == nil
	})
	return s
}

// A session holding 200 locks: renewing only the session keeps all of
// them; when renewals stop, all end together at the session's TTL; a close
// ends another session's 200 at once. Time is a manual clock.
func TestSessionHolds200Locks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	clock := &testenv.ManualClock{}
	cl := testenv.Start(t, 3, testenv.Options{Clock: clock})
	hc := cl.HTTPClient()
	f := apiClient{t, hc, cl.Followers()[0].URL()} // every write forwarded
	nudge := func() { clock.Advance(time.Millisecond) }
	format5(t, f, nudge)

	held := func(prefix string) int {
		var list api.LockList
		f.must(200, "GET", "/v1/locks?prefix="+prefix, "", &list)
		return len(list.Locks)
	}
	fill := func(prefix string, ttl int) api.Session {
		var s api.Session
		f.must(200, "POST", "/v1/sessions", fmt.Sprintf(`{"owner":"%s","ttl_ms":%d,"session_id":"%s-session-000000"}`, prefix, ttl, prefix), &s)
		for i := range 200 {
			var l api.Lease
			f.must(200, "POST", "/v1/locks/acquire", fmt.Sprintf(`{"name":"%s/%03d","owner":"%s","session_id":%q,"lease_id":"%s-lease-%06d"}`, prefix, i, prefix, s.SessionID, prefix, i), &l)
			if l.SessionID != s.SessionID || l.TTLMs != int64(ttl) || l.FencingToken == 0 {
				t.Fatalf("lease of a session: %+v", l)
			}
		}
		return s
	}

	s := fill("exp", 2000)
	var info api.SessionInfo
	f.must(200, "GET", "/v1/sessions/"+s.SessionID, "", &info)
	if len(info.Leases) != 200 || info.Owner != "exp" || info.TTLMs != 2000 || info.RemainingMs == nil {
		t.Fatalf("session read: %d leases, owner %q, ttl %d, remaining %v", len(info.Leases), info.Owner, info.TTLMs, info.RemainingMs)
	}
	f.wantCode(409, api.CodeHeld, "POST", "/v1/locks/acquire", `{"name":"exp/007","ttl_ms":1000}`)

	// 6 s of renewing the session every 1.5 s keeps all 200.
	for range 4 {
		clock.Advance(1500 * time.Millisecond)
		f.must(200, "POST", "/v1/sessions/renew", fmt.Sprintf(`{"session_id":%q}`, s.SessionID), nil)
	}
	if n := held("exp/"); n != 200 {
		t.Fatalf("after 6 s of session renewals: %d of 200 locks held", n)
	}
	// Renewals stop: all 200 end together, at one index, at the TTL.
	clock.Advance(1999 * time.Millisecond)
	if n := held("exp/"); n != 200 {
		t.Fatalf("1999 ms after the last renew of a 2000 ms session: %d of 200 held", n)
	}
	clock.Advance(time.Millisecond)
	// Past the deadline: a leader change meanwhile restarts the FSM clock
	// from the last stamp (leases only get longer), so move time on freely.
	testenv.WaitFor(t, 10*time.Second, "all 200 locks to end with the session", func() bool {
		clock.Advance(50 * time.Millisecond)
		return held("exp/") == 0
	})
	f.wantCode(404, api.CodeNoSession, "GET", "/v1/sessions/"+s.SessionID, "")
	f.wantCode(404, api.CodeNoSession, "POST", "/v1/sessions/renew", fmt.Sprintf(`{"session_id":%q}`, s.SessionID))
	f.wantCode(404, api.CodeNoSession, "POST", "/v1/locks/acquire", fmt.Sprintf(`{"name":"exp/x","session_id":%q}`, s.SessionID))

	// Close frees another 200 at once.
	s = fill("close", 600000)
	var closed api.SessionClosed
	if f.must(200, "POST", "/v1/sessions/close", fmt.Sprintf(`{"session_id":%q}`, s.SessionID), &closed) && (!closed.Closed || closed.Released != 200) {
		t.Fatalf("close: %+v, want closed with 200 released", closed)
	}
	if n := held("close/"); n != 0 {
		t.Fatalf("after close: %d locks still held", n)
	}
	f.wantCode(404, api.CodeNoSession, "POST", "/v1/sessions/close", fmt.Sprintf(`{"session_id":%q}`, s.SessionID))
	cl.EnsureSame(t)
}

// A semaphore of limit 3: slots 0, 1, 2; a fourth is 409 full listing the
// three; after a release it gets the freed slot with a larger token. Also
// a limit mismatch, and a waiting acquire served when a permit frees.
func TestSemaphoreLimit3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := testenv.Start(t, 3)
	f := apiClient{t, cl.HTTPClient(), cl.Followers()[0].URL()}
	format5(t, f, func() {})

	var permits [3]api.Permit
	for i := range permits {
		f.must(200, "POST", "/v1/semaphores/acquire", fmt.Sprintf(`{"name":"pool","limit":3,"owner":"w%d","ttl_ms":600000,"lease_id":"pool-permit-%06d"}`, i, i), &permits[i])
		if permits[i].Slot != i || permits[i].Limit != 3 || permits[i].FencingToken == 0 {
			t.Fatalf("permit %d: %+v, want slot %d", i, permits[i], i)
		}
	}
	var full struct {
		Holders []api.PermitHolder `json:"holders"`
	}
	if err := json.Unmarshal(f.wantCode(409, api.CodeFull, "POST", "/v1/semaphores/acquire", `{"name":"pool","limit":3,"owner":"w3","ttl_ms":600000}`), &full); err != nil || len(full.Holders) != 3 {
		t.Fatalf("full: holders %+v (%v), want 3", full.Holders, err)
	}
	b := f.wantCode(409, api.CodeLimitMismatch, "POST", "/v1/semaphores/acquire", `{"name":"pool","limit":4,"ttl_ms":600000}`)
	if !strings.Contains(string(b), `"limit":3`) {
		t.Errorf("limit_mismatch without the current limit: %s", b)
	}
	var sem api.Semaphore
	f.must(200, "GET", "/v1/semaphores/pool", "", &sem)
	if sem.Limit != 3 || len(sem.Holders) != 3 {
		t.Fatalf("semaphore read: %+v", sem)
	}

	f.must(200, "POST", "/v1/semaphores/release", fmt.Sprintf(`{"name":"pool","lease_id":%q}`, permits[1].LeaseID), nil)
	var fourth api.Permit
	f.must(200, "POST", "/v1/semaphores/acquire", `{"name":"pool","limit":3,"owner":"w3","ttl_ms":600000,"lease_id":"pool-permit-000003"}`, &fourth)
	if fourth.Slot != 1 || fourth.FencingToken <= permits[2].FencingToken {
		t.Fatalf("after slot 1 freed: %+v, want slot 1 with a token above %d", fourth, permits[2].FencingToken)
	}
	f.wantCode(409, api.CodeNotHolder, "POST", "/v1/semaphores/renew", fmt.Sprintf(`{"name":"pool","lease_id":%q}`, permits[1].LeaseID))

	// A waiting acquire is served when a permit frees.
	done := make(chan api.Permit, 1)
	go func() {
		st, b := f.do("POST", "/v1/semaphores/acquire", `{"name":"pool","limit":3,"owner":"w4","ttl_ms":600000,"wait_ms":60000,"lease_id":"pool-permit-000004"}`)
		var p api.Permit
		if st != 200 || json.Unmarshal(b, &p) != nil {
			t.Errorf("waiting acquire: %d %s", st, b)
		}
		done <- p
	}()
	l := apiClient{t, cl.HTTPClient(), cl.Leader().URL()}
	testenv.WaitFor(t, 10*time.Second, "the acquire to park", func() bool {
		var s api.Semaphore
		l.must(200, "GET", "/v1/semaphores/pool", "", &s)
		return s.Waiters == 1
	})
	f.must(200, "POST", "/v1/semaphores/release", fmt.Sprintf(`{"name":"pool","lease_id":%q}`, permits[0].LeaseID), nil)
	if p := <-done; p.Slot != 0 || p.FencingToken <= fourth.FencingToken {
		t.Fatalf("parked acquire: %+v, want slot 0 with a token above %d", p, fourth.FencingToken)
	}
	cl.EnsureSame(t)
}

// Two shared holders together; a writer is 409 held (listing both) until
// both leave, then gets a token larger than both.
func TestSharedReadersThenWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := testenv.Start(t, 3)
	f := apiClient{t, cl.HTTPClient(), cl.Followers()[0].URL()}
	format5(t, f, func() {})

	var r1, r2 api.Lease
	f.must(200, "POST", "/v1/locks/acquire", `{"name":"cfg","owner":"r1","ttl_ms":600000,"mode":"shared","lease_id":"cfg-reader-1-000000"}`, &r1)
	f.must(200, "POST", "/v1/locks/acquire", `{"name":"cfg","owner":"r2","ttl_ms":600000,"mode":"shared","lease_id":"cfg-reader-2-000000"}`, &r2)
	if r1.Mode != api.ModeShared || r2.Mode != api.ModeShared || r2.FencingToken <= r1.FencingToken {
		t.Fatalf("readers: %+v %+v", r1, r2)
	}
	var held api.HeldError
	if err := json.Unmarshal(f.wantCode(409, api.CodeHeld, "POST", "/v1/locks/acquire", `{"name":"cfg","owner":"w","ttl_ms":600000}`), &held); err != nil {
		t.Fatal(err)
	}
	if len(held.Holders) != 2 || held.Holder.FencingToken != r1.FencingToken {
		t.Fatalf("held by two readers: %+v", held)
	}
	var lock api.Lock
	f.must(200, "GET", "/v1/locks/cfg", "", &lock)
	if lock.Mode != api.ModeShared || len(lock.Holders) != 2 || lock.FencingToken != r1.FencingToken || lock.Owner != "r1" {
		t.Fatalf("read of a shared lock: %+v", lock)
	}
	f.must(200, "POST", "/v1/locks/release", fmt.Sprintf(`{"name":"cfg","lease_id":%q}`, r1.LeaseID), nil)
	f.wantCode(409, api.CodeHeld, "POST", "/v1/locks/acquire", `{"name":"cfg","owner":"w","ttl_ms":600000}`)
	f.must(200, "POST", "/v1/locks/release", fmt.Sprintf(`{"name":"cfg","lease_id":%q}`, r2.LeaseID), nil)
	var w api.Lease
	f.must(200, "POST", "/v1/locks/acquire", `{"name":"cfg","owner":"w","ttl_ms":600000,"lease_id":"cfg-writer-00000000"}`, &w)
	if w.Mode != "" || w.FencingToken <= r2.FencingToken {
		t.Fatalf("writer: %+v, want exclusive with a token above %d", w, r2.FencingToken)
	}
	f.wantCode(409, api.CodeHeld, "POST", "/v1/locks/acquire", `{"name":"cfg","owner":"r3","ttl_ms":600000,"mode":"shared"}`)
	cl.EnsureSame(t)
}
