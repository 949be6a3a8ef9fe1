package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// A force release needs an admin token (403 for read-write, and the store
// sees nothing), ends the holder's lease, names the caller in the log, and
// answers released:false when no lease held the lock.
func TestForceReleaseNeedsAdmin(t *testing.T) {
	f := newLeader("n1")
	var logs syncLog
	s := New(f, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Tokens: testTokens(t),
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
	rec := do(t, s, "POST", "/v1/locks/acquire", `{"name":"a","owner":"worker-1","ttl_ms":10000,"lock_delay_ms":500}`, "Authorization", "Bearer "+tokRW)
	if rec.Code != http.StatusOK {
		t.Fatalf("acquire: %d %s", rec.Code, rec.Body)
	}
	force := `{"name":"a","force":true}`
	rec = do(t, s, "POST", "/v1/locks/release", force, "Authorization", "Bearer "+tokRW)
	wantError(t, rec, http.StatusForbidden, "forbidden", "admin")
	if h := rec.Header().Get("WWW-Authenticate"); !strings.Contains(h, "insufficient_scope") {
		t.Errorf("WWW-Authenticate %q, want insufficient_scope as for every 403", h)
	}
	if n := len(f.commands()); n != 1 {
		t.Fatalf("a refused force release reached the store (%d commands)", n)
	}
	rec = do(t, s, "POST", "/v1/locks/release", force, "Authorization", "Bearer "+tokAdmin)
	wantJSON(t, rec, http.StatusOK, `{"released":true,"holder":{"owner":"worker-1","fencing_token":1}}`)
	if got := f.commands()[1]; got.Op != fsm.OpForceRelease || got.Name != "a" || got.LeaseID != "" {
		t.Errorf("store got %+v, want a force release of a", got)
	}
	admin := "sha256:" + hashOf(tokAdmin)[:8]
	if l := logs.String(); !strings.Contains(l, "force release: ended a lease") || !strings.Contains(l, "by="+admin) || !strings.Contains(l, "holder=worker-1") {
		t.Errorf("force release not logged with the admin's token name %s:\n%s", admin, l)
	}
	// In its lock-delay now: nothing to end.
	rec = do(t, s, "POST", "/v1/locks/release", force, "Authorization", "Bearer "+tokAdmin)
	wantJSON(t, rec, http.StatusOK, `{"released":false}`)
	assertNoTokens(t, logs.String())
}

// With tokens off every caller may force, as for every admin route.
func TestForceReleaseTokensOff(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	mustAcquire(t, s, `{"name":"a","owner":"o","ttl_ms":10000}`)
	wantJSON(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","force":true}`), http.StatusOK,
		`{"released":true,"holder":{"owner":"o","fencing_token":1}}`)
	mustAcquire(t, s, `{"name":"a","ttl_ms":1000}`) // no lock-delay: free at once
	wantJSON(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"free","force":true}`), http.StatusOK, `{"released":false}`)
}

func TestForceReleaseRequestValidation(t *testing.T) {
	s := newServer(newLeader("n1"))
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","force":true,"lease_id":"`+leaseA+`"}`),
		http.StatusBadRequest, "bad_request", "lease_id: must be empty with force")
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","force":false}`),
		http.StatusBadRequest, "bad_request", "lease_id")
	wantError(t, do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"","force":true}`),
		http.StatusBadRequest, "bad_request", "name")
}

// Before every node reads command format 3 the leader refuses: 503
// not_supported_yet, with Retry-After (nothing was written).
func TestForceReleaseNotSupportedYet(t *testing.T) {
	f := newLeader("n1")
	f.apply = func(_ context.Context, cmd fsm.Command) (fsm.Result, error) {
		return fsm.Result{}, fmt.Errorf("%w: force release needs every node at command version 3; upgrade", nodeapi.ErrNotSupportedYet)
	}
	rec := do(t, newServer(f), http.MethodPost, "/v1/locks/release", `{"name":"a","force":true}`)
	wantError(t, rec, http.StatusServiceUnavailable, "not_supported_yet", "command version 3")
	wantRetryAfter(t, rec)
}
