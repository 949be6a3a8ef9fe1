package workload

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// Any 504 (the server's unknown_outcome, or a proxy's gateway timeout) may
// or may not have applied: it is an unknown outcome, like a timeout.
func TestGatewayTimeoutIsUnknown(t *testing.T) {
	for _, body := range []string{`{"error":"unknown_outcome","message":"the node cannot know"}`, "<html>gateway timeout</html>", ""} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusGatewayTimeout)
			w.Write([]byte(body))
		}))
		c := New(Config{Nodes: []string{srv.URL}})
		resp, err := http.Post(srv.URL, "application/json", nil)
		r := c.classify(resp, err)
		srv.Close()
		if r.Outcome != history.Unknown || r.Status != 504 || r.RetryAfter != 1 {
			t.Errorf("body %q: %+v, want an unknown outcome with Retry-After 1", body, r)
		}
	}
}

// A read records the value and index it was answered (the body's index, or
// the header's when the body has none); an update's 503 not_supported_yet
// is an unknown outcome like any other write's 5xx, its 409 not_holder definite.
func TestClassifyValueIndexAndUpdate(t *testing.T) {
	cases := []struct {
		status      int
		header      string
		body        string
		out, value  string
		index       uint64
		retryAfter1 bool
	}{
		{200, "", `{"name":"L","held":true,"owner":"c1","fencing_token":5,"ttl_ms":1000,"value":"c1-v3","index":12}`, history.OK, "c1-v3", 12, false},
		{200, "", `{"name":"L","held":false,"index":14}`, history.Free, "", 14, false},
		{200, "17", `{"name":"L","held":false}`, history.Free, "", 17, false},
		{409, "", `{"error":"not_holder"}`, history.NotHolder, "", 0, false},
		{503, "", `{"error":"not_supported_yet"}`, history.Unknown, "", 0, true},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.header != "" {
				w.Header().Set("X-Raftlock-Index", tc.header)
			}
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		c := New(Config{Nodes: []string{srv.URL}})
		resp, err := http.Get(srv.URL)
		r := c.classify(resp, err)
		srv.Close()
		if r.Outcome != tc.out || r.Value != tc.value || r.Index != tc.index || (r.RetryAfter == 1) != tc.retryAfter1 {
			t.Errorf("%d %s: %+v, want outcome %s value %q index %d", tc.status, tc.body, r, tc.out, tc.value, tc.index)
		}
	}
}

// The answers of the mixed cycles: a permit's slot, limit and session; the new
// refusals are definite, each with its own outcome.
func TestClassifyPermitsAndSessions(t *testing.T) {
	cases := []struct {
		status  int
		body    string
		out     string
		slot    int
		limit   int64
		session string
	}{
		{200, `{"name":"S","owner":"c1","lease_id":"p01-000001-0000abcd","slot":2,"fencing_token":40,"limit":3,"ttl_ms":1000,"session_id":"s01-000001-00001234"}`, history.OK, 2, 3, "s01-000001-00001234"},
		{200, `{"session_id":"s01-000001-00001234","owner":"c1","ttl_ms":1000,"lock_delay_ms":0}`, history.OK, 0, 0, "s01-000001-00001234"},
		{404, `{"error":"no_session","message":"session unknown or ended"}`, history.NoSession, 0, 0, ""},
		{409, `{"error":"full","message":"m","holders":[{"owner":"c2","slot":0,"fencing_token":7}]}`, history.Full, 0, 0, ""},
		{409, `{"error":"limit_mismatch","message":"m","limit":2}`, history.LimitMismatch, 0, 2, ""},
		{409, `{"error":"session_full","message":"m"}`, history.SessionFull, 0, 0, ""},
		{404, `{"error":"not_found","message":"m"}`, history.Fail, 0, 0, ""},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		c := New(Config{Nodes: []string{srv.URL}})
		resp, err := http.Get(srv.URL)
		r := c.classify(resp, err)
		srv.Close()
		if r.Outcome != tc.out || r.Slot != tc.slot || r.Limit != tc.limit || r.Session != tc.session {
			t.Errorf("%d %s: %+v, want outcome %s slot %d limit %d session %q", tc.status, tc.body, r, tc.out, tc.slot, tc.limit, tc.session)
		}
	}
}
