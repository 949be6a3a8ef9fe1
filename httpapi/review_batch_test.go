package httpapi

import (
	"context"
	"github.com/raftlock/raftlock/fsm"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// On a server not served through Listener (HTTP/1 with the response
// controller: internal/testenv's nodes, an embedder's http.Server), a
// batched call refused at the in-flight cap runs refuseBody, which sets
// the batch connection's read deadline to now. The batch's body has been
// read, so net/http's background read on that connection fails, and
// net/http cancels the connection's context: the batch's other calls are
// cut off (504 after their command was handed to the store), and every
// later request on that kept-alive connection starts with a dead context.
func TestReviewBatchCallRefusedAtInflightCapCancelsTheConnection(t *testing.T) {
	f := newLeader("n1")
	entered, proceed := make(chan struct{}, 1), make(chan struct{})
	f.apply = func(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
		if !strings.HasPrefix(cmd.Name, "slow") {
			return f.applyLocal(cmd), nil
		}
		entered <- struct{}{}
		select {
		case <-ctx.Done():
			return fsm.Result{}, ctx.Err()
		case <-proceed:
			return f.applyLocal(cmd), nil
		}
	}
	// Two slots: the batch's and one call's, which waits in the store; the
	// other call gets 429.
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
	answer := make(chan string, 1)
	go func() {
		_, b := post("/v1/batch", batchOf(
			batchCallOf(pathAcquire, `{"name":"slow-a","ttl_ms":10000}`),
			batchCallOf(pathAcquire, `{"name":"slow-b","ttl_ms":10000}`),
		))
		answer <- b
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no call reached the store")
	}
	select {
	case b := <-answer:
		close(proceed)
		t.Errorf("the slow call was cut off by the other's 429: %s", b)
	case <-time.After(5 * time.Second): // the slow call is still waiting, as it should
		close(proceed)
		<-answer
	}
	if status, b := post(pathRelease, `{"name":"x","lease_id":"`+leaseA+`"}`); status != http.StatusConflict {
		t.Fatalf("the next request on the connection: %d %s, want 409 not_holder", status, b)
	}
}
