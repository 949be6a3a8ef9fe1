package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv"
)

// GET /v1/cluster/members on the leader, with one follower down: the down
// member is listed unreachable, with an error and no lag; the others carry
// their own applied index, readiness and lag behind the leader's log.
func TestMembersWithOneDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := testenv.Start(t, 3)
	leader := cl.Leader()
	down := cl.Followers()[0]
	down.Stop()
	members := func() api.Members {
		t.Helper()
		resp, err := cl.HTTPClient().Get(leader.URL() + "/v1/cluster/members")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("members: status %d", resp.StatusCode)
		}
		var v api.Members
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var got api.Members
	var leaderID string
	testenv.WaitFor(t, 10*time.Second, "the up members ready, one of them leading", func() bool {
		// Under load leadership may move between the two up members after
		// the test looked: the answer must flag whoever leads as the
		// answering node knows it, and exactly that member.
		leaderID, _ = leader.Leader()
		got = members()
		leaders := 0
		for _, m := range got.Members {
			if m.ID != down.ID && !m.Ready {
				return false
			}
			if m.Leader {
				leaders++
			}
		}
		now, _ := leader.Leader()
		return leaders == 1 && leaderID != "" && now == leaderID
	})
	if len(got.Members) != 3 {
		t.Fatalf("members: %+v", got)
	}
	for _, m := range got.Members {
		switch {
		case m.ID == down.ID:
			if m.Reachable || m.Ready || m.Error == "" || m.Lag != nil || m.AppliedIndex != 0 {
				t.Errorf("down member %s: %+v", m.ID, m)
			}
		default:
			if !m.Reachable || m.Error != "" || m.Lag == nil || m.AppliedIndex == 0 || m.Term == 0 {
				t.Errorf("up member %s: %+v", m.ID, m)
			}
			if m.Leader != (m.ID == leaderID) {
				t.Errorf("member %s: leader %v, the leader is %s", m.ID, m.Leader, leaderID)
			}
		}
	}
}
