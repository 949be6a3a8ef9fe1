package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv"
)

// On a real single node, a leadership transfer has nobody to go to: 409
// no_successor naming why, not raft's bare "cannot find peer" as a 500; and
// a transfer to the node itself answers 200 with it, at once.
func TestTransferLeadershipSingleNode(t *testing.T) {
	cl := testenv.Start(t, 1)
	n := cl.Nodes[0]
	post := func(body string) (int, []byte) {
		t.Helper()
		resp, err := cl.HTTPClient().Post(n.URL()+"/v1/cluster/transfer-leadership", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	testenv.WaitFor(t, 15*time.Second, "the node to lead", func() bool {
		id, _ := n.Leader()
		return id != ""
	})
	st, b := post(`{}`)
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil || st != http.StatusConflict || e.Error != api.CodeNoSuccessor || !strings.Contains(e.Message, "only voter") {
		t.Errorf("transfer {} on one node: %d %s, want 409 no_successor naming the only voter", st, b)
	}
	start := time.Now()
	st, b = post(`{"id":"` + n.ID + `"}`)
	var tr api.Transferred
	if err := json.Unmarshal(b, &tr); err != nil || st != http.StatusOK || tr.Leader != n.ID || tr.Message == "" {
		t.Errorf("transfer to the leader itself: %d %s, want 200 with leader %s and a message", st, b, n.ID)
	}
	if id, _ := n.Leader(); id != n.ID {
		t.Errorf("leader %q after the refused transfers, want %s", id, n.ID)
	}
	t.Logf("transfer to itself answered in %s", time.Since(start))
}
