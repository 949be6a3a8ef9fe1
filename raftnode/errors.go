package raftnode

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Errors a node returns. The HTTP layer maps each to one status code. Each
// says whether the command may have been applied: only ErrIndeterminate (and
// errors wrapping it) leave that open; the others mean nothing was applied.
var (
	// ErrNotLeader: this node cannot decide; the leader (if known) can.
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader: no leader is known (election in progress, quorum lost).
	ErrNoLeader = errors.New("no leader")
	// ErrIndeterminate: the entry was handed to Raft and then the node lost
	// track of it (leadership lost, or Raft shut down, with the entry in
	// flight); nobody knows whether it committed, and it may still commit
	// later. Retrying with the same lease id is safe.
	ErrIndeterminate = errors.New("outcome unknown")
	// ErrLeaderChanged: a parked acquire was dropped because this node
	// stopped leading; the client re-enters the wait on the new leader.
	ErrLeaderChanged = errors.New("leadership changed while waiting; retry on the new leader")
	// ErrOverloaded: the Raft apply queue is full.
	ErrOverloaded = errors.New("overloaded")
	// ErrShutdown: the node is stopping.
	ErrShutdown = errors.New("node is shutting down")
	// ErrUnknownNode: a membership change names a node that is not a member.
	ErrUnknownNode = errors.New("unknown node")
)

// readOps are the operations passed to raftError that write nothing: when
// they fail, nothing can have been applied. Every other op is taken to have
// handed an entry to Raft, so that an unknown op errs on "outcome unknown".
var readOps = map[string]bool{"verify leader": true, "get configuration": true}

// raftError translates hashicorp/raft's errors into the node's own, saying
// only what is known: an entry that raft accepted and then failed with
// ErrLeadershipLost or ErrRaftShutdown may have committed (raft answers
// ErrRaftShutdown even for a committed entry it did not get to apply), while
// ErrNotLeader, ErrLeadershipTransferInProgress and ErrEnqueueTimeout are
// answered before the entry reaches the log.
func raftError(op string, err error) error {
	write := !readOps[op]
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrNotVoter):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost) && write:
		return fmt.Errorf("%s: %w: leadership lost with the entry in flight", op, ErrIndeterminate)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%s: %w (leadership lost)", op, ErrNoLeader)
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNoLeader // refused before it was logged: safe to retry
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return ErrOverloaded // never reached the log
	case errors.Is(err, raft.ErrRaftShutdown) && write:
		return fmt.Errorf("%s: %w: raft shut down with the entry in flight (%w)", op, ErrIndeterminate, ErrShutdown)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	}
	return fmt.Errorf("%s: %w", op, err)
}
