package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/admission"
)

// waitUntil polls cond until it holds, failing after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantCapRefusal checks a cap's 429: overloaded, the tenant and its cap
// named, Retry-After and retry_after_ms.
func wantCapRefusal(t *testing.T, rec *httptest.ResponseRecorder, msg string) {
	t.Helper()
	wantError(t, rec, http.StatusTooManyRequests, "overloaded", msg)
	wantRetryAfter(t, rec)
	var b struct {
		RetryAfterMs int64 `json:"retry_after_ms"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &b); b.RetryAfterMs != 1000 {
		t.Errorf("retry_after_ms %d, want 1000; body %s", b.RetryAfterMs, rec.Body)
	}
}

// A tenant may park at most its cap of acquires with wait_ms, with or
// without admission control; another tenant parks as before, and an
// answered wait gives its place back.
func TestTenantCapWaits(t *testing.T) {
	st := newHeldStore(func(_ fsm.Command, wait time.Duration) bool { return wait > 0 })
	s := New(st, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(),
		Admission: Admission{Disabled: true}, Caps: TenantCaps{Waits: 2}})
	mustAcquire(t, s, `{"name":"flood/a","ttl_ms":10000}`)
	mustAcquire(t, s, `{"name":"calm/a","ttl_ms":10000}`)
	var parked []<-chan *httptest.ResponseRecorder
	park := func(body string) {
		t.Helper()
		ch := inBackground(s, body)
		select {
		case <-st.entered:
		case rec := <-ch:
			t.Fatalf("a wait within the cap answered %d %s", rec.Code, rec.Body)
		}
		parked = append(parked, ch)
	}
	park(`{"name":"flood/a","ttl_ms":10000,"wait_ms":60000}`)
	park(`{"name":"flood/a","ttl_ms":10000,"wait_ms":60000}`)
	calls := st.writes()
	// Refused before the parse (a body the early path reads), and after it
	// (an escaped name it leaves to the full path).
	for _, body := range []string{`{"name":"flood/b","ttl_ms":10000,"wait_ms":60000}`, `{"name":"flood\/b","ttl_ms":10000,"wait_ms":60000}`} {
		wantCapRefusal(t, do(t, s, http.MethodPost, "/v1/locks/acquire", body), `tenant "flood" has 2 acquires waiting, at its cap of 2`)
	}
	rec := do(t, s, http.MethodPost, "/v1/semaphores/acquire", `{"name":"flood/s","limit":1,"ttl_ms":10000,"wait_ms":60000}`)
	wantCapRefusal(t, rec, `at its cap of 2`)
	if st.writes() != calls {
		t.Fatal("a refused wait reached the store")
	}
	mustAcquire(t, s, `{"name":"flood/b","ttl_ms":10000}`) // only waits count
	park(`{"name":"calm/a","ttl_ms":10000,"wait_ms":60000}`)

	close(st.release)
	for _, ch := range parked {
		<-ch
	}
	if n := s.caps.waits.Of("flood"); n != 0 {
		t.Fatalf("%d waits still counted after every answer", n)
	}
	park(`{"name":"flood/a","ttl_ms":10000,"wait_ms":60000}`)
}

// A tenant may park at most its cap of blocking reads on a node; a plain
// read, and another tenant's blocking read, still pass.
func TestTenantCapBlockingReads(t *testing.T) {
	s := New(newLeader("n1"), Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Caps: TenantCaps{BlockingReads: 2}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 2)
	for _, target := range []string{"/v1/locks/flood/a?index=0&wait_ms=60000", "/v1/locks?prefix=flood/&index=0&wait_ms=60000"} {
		req := httptest.NewRequest(http.MethodGet, target, nil).WithContext(ctx)
		go func() {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			done <- rec.Code
		}()
	}
	waitUntil(t, 10*time.Second, "two blocking reads parked", func() bool { return s.caps.reads.Of("flood") == 2 })
	wantCapRefusal(t, do(t, s, "GET", "/v1/locks/flood/b?index=0&wait_ms=60000", ""), `tenant "flood" has 2 blocking reads waiting, at its cap of 2`)
	if rec := do(t, s, "GET", "/v1/locks/flood/b", ""); rec.Code != http.StatusOK {
		t.Errorf("a plain read at the cap: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, s, "GET", "/v1/locks/calm/a?index=0&wait_ms=1", ""); rec.Code != http.StatusOK {
		t.Errorf("another tenant's blocking read: %d %s", rec.Code, rec.Body)
	}
	cancel()
	<-done
	<-done
	if n := s.caps.reads.Of("flood"); n != 0 {
		t.Fatalf("%d blocking reads still counted after both ended", n)
	}
}

// A tenant may have at most its cap of live sessions; a close, or an end
// the leader sees in its state (here another token's close), frees a place.
func TestTenantCapSessions(t *testing.T) {
	toks, err := ParseTokens(strings.NewReader(prefixTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	s := New(newLeader("n1"), Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Tokens: toks, Caps: TenantCaps{Sessions: 2}})
	// A clock that moves a second a look, so that every refusal looks at
	// the sessions again (they are looked at once per PruneEvery).
	var clock time.Time
	s.caps.sessions = admission.NewMembers("sessions", 2, func() time.Time { clock = clock.Add(time.Second); return clock })
	create := func(tok string) *httptest.ResponseRecorder {
		return do(t, s, "POST", "/v1/sessions", `{"owner":"o","ttl_ms":60000}`, bearerOf(tok)...)
	}
	idOf := func(rec *httptest.ResponseRecorder) string {
		t.Helper()
		var ss struct {
			ID string `json:"session_id"`
		}
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &ss) != nil {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
		return ss.ID
	}
	first := idOf(create(tokTenantA))
	second := idOf(create(tokTenantA))
	wantCapRefusal(t, create(tokTenantA), `tenant "tenantA" has 2 sessions, at its cap of 2`)
	idOf(create(tokTenantB)) // another tenant's own cap

	if rec := do(t, s, "POST", "/v1/sessions/close", `{"session_id":"`+first+`"}`, bearerOf(tokTenantA)...); rec.Code != http.StatusOK {
		t.Fatalf("close: %d %s", rec.Code, rec.Body)
	}
	third := idOf(create(tokTenantA))
	wantCapRefusal(t, create(tokTenantA), `at its cap of 2`)
	// Ended elsewhere: the leader finds it gone at the cap.
	if rec := do(t, s, "POST", "/v1/sessions/close", `{"session_id":"`+second+`"}`, bearerOf(tokAdmin)...); rec.Code != http.StatusOK {
		t.Fatalf("admin close: %d %s", rec.Code, rec.Body)
	}
	idOf(create(tokTenantA))
	if rec := do(t, s, "POST", "/v1/sessions/close", `{"session_id":"`+third+`"}`, bearerOf(tokTenantA)...); rec.Code != http.StatusOK {
		t.Fatalf("close: %d %s", rec.Code, rec.Body)
	}
	if n := s.caps.sessions.Of("tenantA"); n != 1 {
		t.Fatalf("%d sessions counted for tenantA, want 1", n)
	}
}
