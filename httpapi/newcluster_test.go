package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// A cluster that starts together accepts every feature from its first
// request: a session create, a lock with a value and a semaphore permit sent
// to a follower as soon as the cluster has a leader are answered 200, not
// 503 not_supported_yet while the new leader has yet to survey its members'
// command formats. Ten fresh clusters, so the first request meets the
// leader at different points of its first survey.
func TestNewClusterAcceptsEveryFeatureFromTheFirstRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("ten fresh three-node clusters")
	}
	httpc := &http.Client{Timeout: 10 * time.Second}
	post := func(url string, body any) (int, string) {
		b, _ := json.Marshal(body)
		resp, err := httpc.Post(url, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		out.ReadFrom(resp.Body)
		return resp.StatusCode, out.String()
	}
	for round := range 10 {
		c := testenv.Start(t, 3)
		follower := c.Followers()[0].URL()
		for _, req := range []struct {
			path string
			body map[string]any
		}{
			{"/v1/sessions", map[string]any{"owner": "first", "ttl_ms": 10000}},
			{"/v1/locks/acquire", map[string]any{"name": "first/value", "ttl_ms": 10000, "value": "10.0.0.1:8080"}},
			{"/v1/semaphores/acquire", map[string]any{"name": "first/sem", "limit": 2, "ttl_ms": 10000}},
		} {
			if code, body := post(follower+req.path, req.body); code != http.StatusOK {
				t.Fatalf("round %d: the first %s on a new cluster: %d %s", round, req.path, code, body)
			}
		}
		c.Close()
	}
}
