package raftnode_test

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// A leader whose process is gone is replaced before any follower's
// heartbeat timeout could run out: here that timeout is 5 s, so an election
// by the ordinary schedule comes no sooner than 5 s after the kill, while
// the followers that find the leader's Raft port refusing, or a restarted
// process at its address that does not lead, elect a leader within about
// LeaderLeaseTimeout and a stagger. Rounds alternate between a leader that
// stays down and one restarted at once.
func TestCrashedLeaderReplacedBeforeHeartbeatTimeout(t *testing.T) {
	const heartbeat = 5 * time.Second
	c := testenv.Start(t, 3, testenv.Options{Configure: func(cfg *raftnode.Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = heartbeat, heartbeat, 100*time.Millisecond
	}})
	for round := range 4 {
		old := c.Leader()
		killed := time.Now()
		restartAtOnce := round%2 == 1
		if restartAtOnce {
			old.Restart() // a kill, and a new process on the same ports
		} else {
			old.Kill()
		}
		var next *testenv.Node
		testenv.WaitFor(t, heartbeat, "a new leader before the heartbeat timeout", func() bool {
			for _, n := range c.Nodes {
				if n.Running() && n.IsLeader() {
					next = n
					return true
				}
			}
			return false
		})
		t.Logf("round %d (restarted at once: %v): %s killed, %s leads after %v", round, restartAtOnce, old.ID, next.ID, time.Since(killed).Round(time.Millisecond))
		if !restartAtOnce {
			old.Restart()
		}
	}
}
