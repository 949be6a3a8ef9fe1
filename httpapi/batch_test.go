package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

func batchOf(calls ...string) string {
	return `{"calls":[` + strings.Join(calls, ",") + `]}`
}

func batchCallOf(path, body string) string {
	return fmt.Sprintf(`{"path":%q,"body":%s}`, path, body)
}

func doBatch(t *testing.T, h http.Handler, body string, hdr ...string) []api.BatchResult {
	t.Helper()
	rec := do(t, h, http.MethodPost, "/v1/batch", body, hdr...)
	if rec.Code != http.StatusOK {
		t.Fatalf("batch: status %d, body %s", rec.Code, rec.Body)
	}
	var ans api.BatchAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
		t.Fatalf("batch answer %s: %v", rec.Body, err)
	}
	return ans.Results
}

// Each call of a batch is answered, in order, exactly as the same request
// sent alone to a twin server in the same state: status, headers the
// client acts on, and body.
func TestBatchAnswersEachCallAsAlone(t *testing.T) {
	calls := [][2]string{
		{pathAcquire, `{"name":"a","owner":"w1","ttl_ms":10000,"lease_id":"lease-aaaaaaaaaaaaaaa1"}`},
		{pathAcquire, `{"name":"held","ttl_ms":10000}`},                                   // held by the setup
		{pathRenew, `{"name":"held","lease_id":"lease-hhhhhhhhhhhhhhh1","ttl_ms":20000}`}, // the holder renews
		{pathRelease, `{"name":"free","lease_id":"lease-fffffffffffffff1"}`},              // nothing to release
		{pathAcquire, `{"name":"","ttl_ms":10000}`},                                       // bad input
		{pathRenew, `{"name":"held","lease_id":"lease-zzzzzzzzzzzzzzz1"}`},                // not the holder
	}
	setup := `{"name":"held","owner":"h","ttl_ms":10000,"lease_id":"lease-hhhhhhhhhhhhhhh1"}`

	// The batch runs its calls at once; the twin runs them one by one. No
	// two calls here touch the same lock in a way their order could change,
	// except the held acquire and the renew of that lock, which answer the
	// same either way.
	batched, alone := newServer(newLeader("n1")), newServer(newLeader("n1"))
	mustAcquire(t, batched, setup)
	mustAcquire(t, alone, setup)
	var parts []string
	for _, c := range calls {
		parts = append(parts, batchCallOf(c[0], c[1]))
	}
	results := doBatch(t, batched, batchOf(parts...))
	if len(results) != len(calls) {
		t.Fatalf("%d results for %d calls", len(results), len(calls))
	}
	for i, c := range calls {
		rec := do(t, alone, http.MethodPost, c[0], c[1])
		got := results[i]
		if got.Status != rec.Code {
			t.Errorf("call %d (%s %s): status %d in the batch, %d alone; %s", i, c[0], c[1], got.Status, rec.Code, got.Body)
			continue
		}
		if strings.Contains(c[1], `"lease_id":"lease-aaaa`) {
			// The token is the entry's index: the twin applied the calls in
			// another order. Everything else must match.
			var a, b lease
			json.Unmarshal(got.Body, &a)
			json.Unmarshal(rec.Body.Bytes(), &b)
			if a.FencingToken == 0 || b.FencingToken == 0 {
				t.Errorf("call %d: no fencing token: %s / %s", i, got.Body, rec.Body)
			}
			a.FencingToken, b.FencingToken = 0, 0
			if a != b {
				t.Errorf("call %d: lease %+v in the batch, %+v alone", i, a, b)
			}
			continue
		}
		wantJSONBody(t, got.Body, rec.Body.String())
	}
}

// A batch that cannot be run as a whole is refused with 400 and runs none
// of its calls; a call that may not be batched (a waiting acquire) is
// refused alone, inside a 200.
func TestBatchRefusalsChangeNothing(t *testing.T) {
	ok := batchCallOf(pathAcquire, `{"name":"x","ttl_ms":10000}`)
	tooMany := make([]string, api.MaxBatchCalls+1)
	for i := range tooMany {
		tooMany[i] = ok
	}
	for _, c := range []struct{ name, body, msg string }{
		{"no calls", `{"calls":[]}`, "1 to 256"},
		{"too many calls", batchOf(tooMany...), "1 to 256"},
		{"a route that is not batched", batchOf(ok, batchCallOf("/v1/sessions", `{}`)), `calls[1].path: "/v1/sessions" cannot be batched`},
		{"a body that is not an object", batchOf(ok, `{"path":"/v1/locks/release","body":"x"}`), "calls[1].body"},
		{"no body", batchOf(ok, `{"path":"/v1/locks/release"}`), "calls[1].body"},
		{"an unknown field", `{"calls":[` + ok + `],"atomic":true}`, "unknown field"},
		{"not JSON", `{"calls":[`, "batch:"},
		{"trailing data", batchOf(ok) + `{}`, "after the JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newLeader("n1")
			rec := do(t, newServer(f), http.MethodPost, "/v1/batch", c.body)
			wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, c.msg)
			if f.writes() != 0 {
				t.Errorf("a refused batch wrote %d commands", f.writes())
			}
		})
	}

	f := newLeader("n1")
	results := doBatch(t, newServer(f), batchOf(ok, batchCallOf(pathAcquire, `{"name":"y","ttl_ms":10000,"wait_ms":100}`)))
	if results[0].Status != http.StatusOK || results[1].Status != http.StatusBadRequest || !strings.Contains(string(results[1].Body), "cannot wait") {
		t.Fatalf("a batch with a waiting acquire: %+v, want the other call done and the wait refused", results)
	}
	if f.writes() != 1 {
		t.Errorf("%d commands written, want the one call that may be batched", f.writes())
	}
}

// Each call is authorized as its own request: a tenant's batch may carry
// its own names only, and a read-only token may not send a batch at all.
func TestBatchCallsAreAuthorizedOneByOne(t *testing.T) {
	f := newLeader("n1")
	s := prefixServer(t, f)
	results := doBatch(t, s, batchOf(
		batchCallOf(pathAcquire, `{"name":"tenantA/job","ttl_ms":10000}`),
		batchCallOf(pathAcquire, `{"name":"tenantB/payroll","ttl_ms":10000}`),
	), bearerOf(tokTenantA)...)
	if results[0].Status != http.StatusOK || results[1].Status != http.StatusForbidden {
		t.Fatalf("tenantA's batch: statuses %d, %d; want 200 for its own name and 403 for tenantB's", results[0].Status, results[1].Status)
	}
	if f.writes() != 1 {
		t.Errorf("%d commands written, want 1", f.writes())
	}
	rec := do(t, s, http.MethodPost, "/v1/batch", batchOf(batchCallOf(pathRelease, `{"name":"tenantA/job","force":true}`)), bearerOf(tokTenantARO)...)
	wantError(t, rec, http.StatusForbidden, api.CodeForbidden, "")
	rec = do(t, s, http.MethodPost, "/v1/batch", batchOf(batchCallOf(pathAcquire, `{"name":"tenantA/x","ttl_ms":10000}`)))
	wantError(t, rec, http.StatusUnauthorized, api.CodeUnauthorized, "")
	if f.writes() != 1 {
		t.Errorf("refused batches wrote: %d commands in all, want 1", f.writes())
	}
}

// A call's own headers (the Retry-After of a 503) come back in its result.
func TestBatchResultCarriesRetryAfter(t *testing.T) {
	f := newLeader("n1")
	f.apply = func(context.Context, fsm.Command) (fsm.Result, error) { return fsm.Result{}, nodeapi.ErrShutdown }
	results := doBatch(t, newServer(f), batchOf(batchCallOf(pathAcquire, `{"name":"x","ttl_ms":10000}`)))
	if results[0].Status != http.StatusServiceUnavailable || results[0].Headers["Retry-After"] == "" {
		t.Fatalf("a node shutting down: result %d %v %s, want 503 with its Retry-After", results[0].Status, results[0].Headers, results[0].Body)
	}
}
