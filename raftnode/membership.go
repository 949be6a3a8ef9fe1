package raftnode

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// Status and NodeInfo are declared in internal/nodeapi, so that the HTTP
// layer reads them without importing raftnode.
type (
	Status   = nodeapi.Status
	NodeInfo = nodeapi.NodeInfo
)

// Status returns the Raft configuration with each node's HTTP address.
func (n *Node) Status() (Status, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return Status{}, raftError("get configuration", err)
	}
	leader, _ := n.Leader()
	s := Status{
		ID:           n.cfg.ID,
		Leader:       leader,
		Term:         n.raft.CurrentTerm(),
		LastIndex:    n.raft.LastIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		ClusterID:    n.machine.ClusterID(),
	}
	addrs := n.machine.Nodes()
	for _, srv := range f.Configuration().Servers {
		id := string(srv.ID)
		s.Nodes = append(s.Nodes, NodeInfo{
			ID: id, RaftAddr: string(srv.Address), HTTPAddr: addrs[id],
			Voter: srv.Suffrage == raft.Voter, Leader: id == leader,
		})
	}
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].ID < s.Nodes[j].ID })
	return s, nil
}

// MemberError is a join request with a malformed field (internal/nodeapi).
type MemberError = nodeapi.MemberError

// ValidateMember checks a joining node's id and addresses (the rule is in
// internal/nodeapi, which the HTTP layer checks with too).
func ValidateMember(id, raftAddr, httpAddr string) error {
	return nodeapi.ValidateMember(id, raftAddr, httpAddr)
}

// Join adds a node as a non-voter, or records the HTTP address of one that
// is already a member (nodes announce themselves this way after every
// start). The leader's promoter (promote.go) makes a non-voter a voter once
// it reports having caught up: a node that never comes up (a wrong address,
// a typo) stays a non-voter and never counts towards the quorum. A node
// known under another address is replaced, as after a rebuild, unless
// removing it would leave fewer healthy voters than a quorum
// (ErrUnsafeChange). A malformed id or address is refused (MemberError)
// before anything changes.
func (n *Node) Join(ctx context.Context, id, raftAddr, httpAddr string) error {
	if err := ValidateMember(id, raftAddr, httpAddr); err != nil {
		return err
	}
	return n.join(ctx, id, raftAddr, httpAddr)
}

func (n *Node) join(ctx context.Context, id, raftAddr, httpAddr string) error {
	term := n.raft.CurrentTerm()
	if !n.IsLeader() {
		return ErrNotLeader
	}
	n.configMu.Lock()
	defer n.configMu.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError("get configuration", err)
	}
	servers := f.Configuration().Servers
	member := false
	var stale []raft.Server
	for _, srv := range servers {
		sameID, sameAddr := srv.ID == raft.ServerID(id), srv.Address == raft.ServerAddress(raftAddr)
		switch {
		case sameID && sameAddr:
			member = true
		case sameID || sameAddr:
			stale = append(stale, srv)
		}
	}
	var live map[raft.ServerID]report
	if len(stale) > 0 {
		live = n.survey(ctx, others(stale, raft.ServerID(n.cfg.ID), func(raft.Server) bool { return true }))
	}
	for _, srv := range stale {
		// A rebuilt node's old incarnation is gone; one that still follows
		// this leader as itself is not stale, and a join must not evict it.
		if srv.ID == raft.ServerID(n.cfg.ID) || live[srv.ID].follows(srv.ID, raft.ServerID(n.cfg.ID), term) {
			return fmt.Errorf("%w: %s at %s would replace %s at %s, which is alive", ErrUnsafeChange, id, raftAddr, srv.ID, srv.Address)
		}
		if err := n.checkRemoval(ctx, term, servers, srv.ID); err != nil {
			return err
		}
		n.log.Info("replacing member", "id", srv.ID, "raft_addr", srv.Address)
		if err := n.raft.RemoveServer(srv.ID, 0, n.cfg.ApplyTimeout).Error(); err != nil {
			return raftError("remove "+string(srv.ID), err)
		}
		servers = others(servers, srv.ID, func(raft.Server) bool { return true })
	}
	if !member {
		// Until a survey has heard the newcomer, write only the oldest
		// command format: it may be an older build.
		n.forgetFormat()
		n.log.Info("adding non-voter; it becomes a voter once caught up", "id", id, "raft_addr", raftAddr)
		if err := n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout).Error(); err != nil {
			return raftError("add non-voter "+id, err)
		}
	}
	if addr, _ := n.machine.NodeAddr(id); httpAddr != "" && addr != httpAddr {
		if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: id, NodeAddr: httpAddr}); err != nil {
			return err
		}
	}
	return nil
}

// Leave removes a member. Removing a voter is refused (ErrUnsafeChange)
// when the voters left would not hold a healthy quorum: the cluster could
// elect no leader afterwards. Membership changes run one at a time
// (configMu), so two removals cannot each pass the check against the same
// configuration and together break the quorum. The member's HTTP address
// is forgotten only once it is out: a refused removal changes nothing.
func (n *Node) Leave(ctx context.Context, id string) error {
	term := n.raft.CurrentTerm()
	if !n.IsLeader() {
		return ErrNotLeader
	}
	n.configMu.Lock()
	defer n.configMu.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError("get configuration", err)
	}
	servers := f.Configuration().Servers
	found := false
	for _, srv := range servers {
		found = found || srv.ID == raft.ServerID(id)
	}
	if !found {
		return fmt.Errorf("%w: %s", ErrUnknownNode, id)
	}
	if err := n.checkRemoval(ctx, term, servers, raft.ServerID(id)); err != nil {
		return err
	}
	n.log.Info("removing member", "id", id)
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return raftError("remove "+id, err)
	}
	if id == n.cfg.ID {
		return nil // no longer leading: its stale address names no member and is never used
	}
	if _, err := n.apply(fsm.Command{Op: fsm.OpRemoveNode, NodeID: id}); err != nil {
		n.log.Warn("member removed, but forgetting its address failed", "id", id, "error", err)
	}
	return nil
}

// TransferLeadership hands leadership to id, or to the most up-to-date voter
// when id is empty, and returns once the transfer finished. With no other
// voter it returns ErrNoSuccessor, and ErrLeadsAlready when id is this node:
// both change nothing.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	st, err := n.Status()
	if err != nil {
		return err
	}
	addr, others := "", 0
	for _, node := range st.Nodes {
		if !node.Voter {
			continue
		}
		if node.ID == id {
			addr = node.RaftAddr
		}
		if node.ID != n.cfg.ID {
			others++
		}
	}
	switch {
	case id != "" && addr == "":
		return fmt.Errorf("%w: %s", ErrUnknownNode, id)
	case id == n.cfg.ID:
		return fmt.Errorf("%w: %s", ErrLeadsAlready, id)
	case others == 0:
		// hashicorp/raft would answer "cannot find peer", which says nothing
		// of why.
		return fmt.Errorf("%w: %s is the only voter", ErrNoSuccessor, n.cfg.ID)
	}
	var fut raft.Future
	if id == "" {
		fut = n.raft.LeadershipTransfer()
	} else {
		fut = n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
	}
	if err := fut.Error(); err != nil {
		return fmt.Errorf("transfer leadership: %w", err)
	}
	return nil
}

// register makes sure the cluster knows this node's HTTP address, so that
// followers can forward to it when it leads. It joins through cfg.Join on a
// fresh data dir, else announces itself to the leader, both with
// cfg.Announce (raftnode speaks no HTTP; httpapi.Joiner does); a leader
// publishes its own address in leaderLoop.
func (n *Node) register() {
	defer n.wg.Done()
	if n.cfg.AdvertiseHTTP == "" || n.cfg.Announce == nil {
		return
	}
	// Poll briskly while there is nobody to announce to (the leader has not
	// published its own address yet); back off only after failed attempts.
	const poll = 50 * time.Millisecond
	backoff := poll
	for {
		if addr, _ := n.machine.NodeAddr(n.cfg.ID); addr == n.cfg.AdvertiseHTTP {
			return
		}
		target := n.cfg.Join
		if _, leaderHTTP := n.Leader(); leaderHTTP != "" {
			target = leaderHTTP
		}
		wait := poll
		if target != "" && !n.IsLeader() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := n.cfg.Announce(ctx, target, n.cfg.ID, n.cfg.AdvertiseRaft, n.cfg.AdvertiseHTTP)
			cancel()
			if err != nil {
				n.log.Debug("announce to leader failed", "target", target, "error", err)
				wait, backoff = backoff, min(2*backoff, 2*time.Second)
			}
		}
		select {
		case <-n.stop:
			return
		case <-time.After(wait):
		}
	}
}
