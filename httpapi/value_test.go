package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// A value comes with the acquire, reads show it, the holder
// changes it with an update (token kept, index moved, a parked read woken),
// anyone else gets 409 not_holder.
func TestValueAndUpdate(t *testing.T) {
	f := newWatchingStore()
	s := newServer(f.fakeStore)
	s.store = f
	mustAcquire(t, s, `{"name":"a","owner":"o","ttl_ms":1000,"lease_id":"`+leaseA+`","value":"host-1:80"}`) // 1
	wantJSON(t, do(t, s, http.MethodGet, "/v1/locks/a", ""), http.StatusOK,
		`{"name":"a","held":true,"owner":"o","fencing_token":1,"ttl_ms":1000,"value":"host-1:80","index":1}`)

	got := async(t, s, "/v1/locks/a?index=1&wait_ms=300000")
	<-f.parked
	rec := do(t, s, http.MethodPost, "/v1/locks/update", `{"name":"a","lease_id":"`+leaseA+`","value":"host-2:80"}`) // 2
	wantJSON(t, rec, http.StatusOK, `{"name":"a","owner":"o","lease_id":"`+leaseA+`","fencing_token":1,"ttl_ms":1000}`)
	wantJSON(t, answer(t, got, "read woken by the update"), http.StatusOK,
		`{"name":"a","held":true,"owner":"o","fencing_token":1,"ttl_ms":1000,"value":"host-2:80","index":2}`)
	wantJSON(t, do(t, s, http.MethodGet, "/v1/locks", ""), http.StatusOK,
		`{"locks":[{"name":"a","held":true,"owner":"o","fencing_token":1,"ttl_ms":1000,"value":"host-2:80","index":2}],"truncated":false,"index":2}`)

	rec = do(t, s, http.MethodPost, "/v1/locks/update", `{"name":"a","lease_id":"`+leaseB+`","value":"x"}`)
	wantError(t, rec, http.StatusConflict, api.CodeNotHolder, `"a"`)
	rec = do(t, s, http.MethodPost, "/v1/locks/update", `{"name":"free","lease_id":"`+leaseA+`","value":"x"}`)
	wantError(t, rec, http.StatusConflict, api.CodeNotHolder, `"free"`)
}

func TestValueValidation(t *testing.T) {
	f := newLeader("n1")
	s := newServer(f)
	long := strings.Repeat("v", api.MaxValue+1)
	for _, body := range []string{
		`{"name":"a","ttl_ms":1000,"value":"` + long + `"}`,
		`{"name":"a","ttl_ms":1000,"value":"` + "\xff" + `"}`,
	} {
		wantError(t, do(t, s, http.MethodPost, "/v1/locks/acquire", body), http.StatusBadRequest, api.CodeBadRequest, "")
	}
	for _, body := range []string{
		`{"name":"a","lease_id":"` + leaseA + `","value":"` + long + `"}`,
		`{"name":"a","lease_id":"` + leaseA + `","value":"` + "\xff" + `"}`,
		`{"name":"a","value":"x"}`,
		`{"lease_id":"` + leaseA + `","value":"x"}`,
		`{"name":"a","lease_id":"` + leaseA + `","value":"x","ttl_ms":1000}`,
	} {
		wantError(t, do(t, s, http.MethodPost, "/v1/locks/update", body), http.StatusBadRequest, api.CodeBadRequest, "")
	}
	if n := len(f.commands()); n != 0 {
		t.Fatalf("%d invalid requests reached the store", n)
	}
	// The longest value is fine.
	mustAcquire(t, s, `{"name":"a","ttl_ms":1000,"value":"`+long[1:]+`"}`)
}

// Until every node reads command format 4 the leader refuses values and
// updates: 503 not_supported_yet, as a force release before format 3.
func TestValueNotSupportedYet(t *testing.T) {
	f := newLeader("n1")
	f.apply = func(_ context.Context, cmd fsm.Command) (fsm.Result, error) {
		if fsm.MinVersion(cmd) >= 4 {
			return fsm.Result{}, fmt.Errorf("%w: format 4 needed", nodeapi.ErrNotSupportedYet)
		}
		return f.applyLocal(cmd), nil
	}
	s := newServer(f)
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"lease_id":"`+leaseA+`","value":"v"}`)
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNotSupportedYet, "")
	mustAcquire(t, s, `{"name":"a","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
	rec = do(t, s, http.MethodPost, "/v1/locks/update", `{"name":"a","lease_id":"`+leaseA+`","value":"v"}`)
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNotSupportedYet, "")
}
