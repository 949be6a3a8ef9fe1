package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv/httpfault"
)

// A batched call that a follower relays, whose leader's answer breaks
// after its head, may have been applied: its result is 504 unknown_outcome,
// never a 200 without its lease.
func TestBatchForwardedCallCutAfterHeadIsUnknown(t *testing.T) {
	leader := httpfault.BreakingLeader(t, httpfault.HeadWithoutBody)
	s := newServer(follower(strings.TrimPrefix(leader.URL, "http://")))
	results := doBatch(t, s, batchOf(
		batchCallOf(pathAcquire, `{"name":"a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`),
		batchCallOf(pathRelease, `{"name":"b","lease_id":"`+leaseA+`"}`),
	))
	for i, res := range results {
		if res.Status != http.StatusGatewayTimeout || !strings.Contains(string(res.Body), api.CodeUnknownOutcome) {
			t.Errorf("call %d: result %d %s, want 504 unknown_outcome: the leader may have applied it", i, res.Status, res.Body)
		}
	}
}

// The same request alone: a 504, not a 200 whose body never comes (which a
// client could read as a grant); a read is asked again, never answered cut.
func TestForwardedRequestCutAfterHeadIsUnknown(t *testing.T) {
	leader := httpfault.BreakingLeader(t, httpfault.HeadWithoutBody)
	s := newServer(follower(strings.TrimPrefix(leader.URL, "http://")))
	rec := do(t, s, http.MethodPost, pathAcquire, `{"name":"a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`)
	wantError(t, rec, http.StatusGatewayTimeout, api.CodeUnknownOutcome, "cut off")
	rec = do(t, s, http.MethodGet, "/v1/locks/a", "")
	if rec.Code == http.StatusOK {
		t.Fatalf("a read whose answer was cut off: 200 %q", rec.Body)
	}
}

// A batch needs an in-flight place for each of its calls, taken before any
// runs: over the cap it is refused 429 as a whole, none of its calls ran,
// and its connection serves the next request as usual.
func TestBatchOverTheInflightCapRunsNoCall(t *testing.T) {
	f := newLeader("n1")
	s := New(f, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Limits: Limits{MaxInflight: 2}})
	srv := httptest.NewServer(s)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	post := func(path, body string) (int, string) {
		resp, err := hc.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The batch's own place and two calls': three, over a cap of two.
	status, b := post("/v1/batch", batchOf(
		batchCallOf(pathAcquire, `{"name":"a","ttl_ms":10000}`),
		batchCallOf(pathAcquire, `{"name":"b","ttl_ms":10000}`),
	))
	if status != http.StatusTooManyRequests || !strings.Contains(b, "none ran") {
		t.Fatalf("batch over the in-flight cap: %d %s, want 429 with none of its calls run", status, b)
	}
	if f.writes() != 0 {
		t.Fatalf("a refused batch wrote %d commands", f.writes())
	}
	if status, b := post("/v1/batch", batchOf(batchCallOf(pathAcquire, `{"name":"a","ttl_ms":10000}`))); status != http.StatusOK || !strings.Contains(b, `"status":200`) {
		t.Fatalf("a one-call batch within the cap on the same connection: %d %s", status, b)
	}
}
