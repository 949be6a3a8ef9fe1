package httpapi

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
)

// cutAfterHeadLeader stands in for a leader that applied the write and
// sent its answer's head, and whose connection then broke before the
// body: the follower has a 200 status and no answer.
func cutAfterHeadLeader(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n")
		buf.Flush()
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A batched call that a follower relays, whose leader's answer breaks
// after its head, has an unknown outcome. The batch answers it 200 with a
// null body: a success with no lease, which the Go client decodes as a
// grant with fencing token 0 (client/review_batch_test.go).
func TestReviewBatchForwardedCallCutAfterHead(t *testing.T) {
	leader := cutAfterHeadLeader(t)
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
