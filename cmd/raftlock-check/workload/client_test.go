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
