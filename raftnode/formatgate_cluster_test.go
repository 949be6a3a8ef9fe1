package raftnode_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// renewSession renews sid on the leader, retrying while leadership moves
// and, for at most notSupported of wall time, while the leader refuses
// format 5: a leader that has not yet applied the earlier terms' entries
// cannot know that the log holds format 5.
func renewSession(t *testing.T, c *testenv.Cluster, sid string, notSupported time.Duration) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var refusedSince time.Time
	for {
		r, err := c.Leader().Apply(testenv.Context(t, 10*time.Second), fsm.Command{Op: fsm.OpSessionRenew, SessionID: sid})
		if errors.Is(err, raftnode.ErrNotSupportedYet) {
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if time.Since(refusedSince) > notSupported {
				t.Fatalf("session renew refused for %v: %v", notSupported, err)
			}
		} else {
			refusedSince = time.Time{}
		}
		retry := errors.Is(err, raftnode.ErrNotSupportedYet) || errors.Is(err, raftnode.ErrIndeterminate) ||
			errors.Is(err, raftnode.ErrNotLeader) || errors.Is(err, raftnode.ErrNoLeader) || errors.Is(err, raftnode.ErrLeaderChanged)
		if retry && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil || r.Status != fsm.StatusOK {
			t.Fatalf("session renew: %+v, %v", r, err)
		}
		return
	}
}

// "Losing a minority loses no lock" with sessions: one follower is down
// and the leader changes. The new leader cannot hear every member, so its
// survey alone would hold it on format 1 and refuse the session's renew
// (503 not_supported_yet) until the session and its locks ran out. The
// committed log already holds format 5, so the new leader writes it: the
// session is renewed and its locks outlive three TTLs with their tokens.
func TestSessionRenewedAfterLeaderChangeWithFollowerDown(t *testing.T) {
	c, clock := startFormat5(t)
	sid := "session-minority-0123456789abcdef"
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionCreate, SessionID: sid, Owner: "worker", TTL: 2000}, fsm.StatusOK)
	tokens := map[string]uint64{}
	for i := 0; i < 5; i++ {
		tokens[sessionLock(i)] = mustApply(t, c, fsm.Command{Op: fsm.OpAcquire, Name: sessionLock(i), Owner: "worker",
			LeaseID: fmt.Sprintf("lease-%03d-0123456789abcdef", i), SessionID: sid}, fsm.StatusOK).Lock.Token
	}
	down := c.Followers()[0]
	down.Kill()
	old := c.Leader()
	old.Kill()
	old.Restart() // a quorum again, with down still down: a new term
	leader := c.Leader()
	if leader == down {
		t.Fatal("a stopped node leads")
	}

	for step := 0; step < 12; step++ { // 6 s of FSM time, three TTLs
		clock.Advance(500 * time.Millisecond)
		renewSession(t, c, sid, 10*time.Second)
	}
	if v := c.Leader().CommandVersion(); v != fsm.MaxCommandVersion {
		t.Fatalf("the leader writes format %d with a member down, want %d", v, fsm.MaxCommandVersion)
	}
	m := c.Leader().Machine()
	for name, tok := range tokens {
		h := m.Holders(name)
		if len(h) != 1 || h[0].Token != tok || h[0].SessionID != sid {
			t.Fatalf("%s after 6 s: holders %+v, want token %d in the session", name, h, tok)
		}
	}
	if down.Running() {
		t.Fatal("the stopped follower came back: the test proves nothing")
	}
}
