package raftnode

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Faster failover when a leader's process dies.
//
// A follower gives its leader up only when its heartbeat timer, randomized
// between HeartbeatTimeout and twice that, finds no contact for a whole
// HeartbeatTimeout; and with hashicorp/raft a voter that still has a leader
// refuses every pre-vote and vote. So an election succeeds only once a
// second voter has timed out too: about two heartbeat timeouts after a
// crash (2.3 s at p50 with the 1 s default). Shorter timeouts would cut
// that, but they also depose healthy leaders whose heartbeats are late on a
// loaded machine.
//
// When the leader's process has died but its host lives, there are signs
// that are both fast and certain: its Raft port refuses connections, or,
// once a new process listens there, that process answers that it does not
// lead. A follower whose leader has been silent for LeaderLeaseTimeout
// dials the leader's Raft address and, if something listens, asks the
// member at the leader's HTTP address for its progress (the same fetch the
// leader's survey uses); on a refusal, or an answer from the leader's id
// naming no leader or another, it lowers raft's heartbeat and election
// timeouts to LeaderLeaseTimeout (the least raft accepts), which makes raft
// check at once and, the leader being silent that long, start an election;
// the configured timeouts come back once a leader is known again. A leader that
// is paused, slow or cut off by the network still accepts or times out the
// dial and does not answer the fetch, and is given up on the ordinary
// schedule. Followers act in the
// order of their ids, crashStagger apart: the first becomes a candidate
// (its pre-vote is refused by the others, which still have a leader), the
// next one's pre-vote and vote the first then grants, so an election is won
// without a split vote.

// crashPoll is how often a follower looks at its leader's silence.
const crashPoll = 50 * time.Millisecond

// crashStagger separates the followers' elections after a crash.
const crashStagger = 100 * time.Millisecond

// watchLeaderCrash runs for the node's life; see the comment above.
func (n *Node) watchLeaderCrash() {
	defer n.wg.Done()
	t := time.NewTicker(crashPoll)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		addr, id := n.raft.LeaderWithID()
		silent := time.Since(n.raft.LastContact())
		if n.raft.State() != raft.Follower || addr == "" || silent < n.cfg.LeaderLeaseTimeout {
			continue
		}
		why := n.leaderGone(id, addr)
		if why == "" {
			continue
		}
		delay := n.crashRank(id) * crashStagger
		n.log.Warn("the leader's process is gone; electing a new leader without waiting for the heartbeat timeout",
			"leader", id, "leader_addr", addr, "evidence", why, "silent", silent.Round(time.Millisecond), "after", delay)
		select {
		case <-n.stop:
			return
		case <-time.After(delay):
		}
		if cur, _ := n.raft.LeaderWithID(); cur != addr {
			continue // a new leader, or this node already gave the old one up
		}
		n.hurryElection(id)
	}
}

// leaderGone says why the process that led as id at addr is certainly gone,
// or "" when nothing shows it.
func (n *Node) leaderGone(id raft.ServerID, addr raft.ServerAddress) string {
	if n.refuses(addr) {
		return "its Raft port refuses connections"
	}
	httpAddr, _ := n.machine.NodeAddr(string(id))
	if n.cfg.FetchProgress == nil || httpAddr == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*crashPoll)
	defer cancel()
	p, err := n.cfg.FetchProgress(ctx, string(id), httpAddr)
	if err != nil || p.ID != string(id) || p.Leader == string(id) {
		return ""
	}
	return "a restarted process answers at its address, following " + strconv.Quote(p.Leader)
}

// refuses says whether nothing listens at the Raft address addr: the dial
// is refused outright. Any other failure (a timeout, a partition, TLS) says
// nothing about the leader's process.
func (n *Node) refuses(addr raft.ServerAddress) bool {
	ctx, cancel := context.WithTimeout(context.Background(), crashPoll)
	defer cancel()
	var conn net.Conn
	var err error
	if n.cfg.RaftDial != nil {
		conn, err = n.cfg.RaftDial(ctx, string(addr))
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", string(addr))
	}
	if err == nil {
		conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// crashRank is this node's place among the voters other than leader, by id.
func (n *Node) crashRank(leader raft.ServerID) time.Duration {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != leader {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	return time.Duration(max(slices.Index(ids, n.cfg.ID), 0))
}

// hurryElection lowers raft's heartbeat and election timeouts to
// LeaderLeaseTimeout until a leader other than old is known (or a few
// heartbeat timeouts pass), then puts the configured ones back. The election
// timeout matters when the first follower to act has the longer log: its
// pre-vote is refused by the second (which still had a leader), and the
// second's by it (a shorter log), so the first must try again, and it
// waits an election timeout to do so.
func (n *Node) hurryElection(old raft.ServerID) {
	if err := n.reloadRaft(func(rc *raft.ReloadableConfig) {
		rc.HeartbeatTimeout, rc.ElectionTimeout = n.cfg.LeaderLeaseTimeout, n.cfg.LeaderLeaseTimeout
	}); err != nil {
		n.log.Warn("could not shorten raft's timeouts for an election", "error", err)
		return
	}
	defer func() {
		if err := n.reloadRaft(func(rc *raft.ReloadableConfig) {
			rc.HeartbeatTimeout, rc.ElectionTimeout = n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout
		}); err != nil {
			n.log.Error("raft's timeouts not restored after an election", "heartbeat_timeout", n.cfg.HeartbeatTimeout, "election_timeout", n.cfg.ElectionTimeout, "error", err)
		}
	}()
	giveUp := time.After(4 * n.cfg.HeartbeatTimeout)
	t := time.NewTicker(crashPoll)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-giveUp:
			return
		case <-t.C:
		}
		if _, id := n.raft.LeaderWithID(); id != "" && id != old {
			return
		}
	}
}

// reloadRaft changes raft's reloadable settings under reloadMu, so that two
// changes (an election hurried, a log compacted) never undo each other.
func (n *Node) reloadRaft(change func(*raft.ReloadableConfig)) error {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	rc := n.raft.ReloadableConfig()
	change(&rc)
	return n.raft.ReloadConfig(rc)
}
