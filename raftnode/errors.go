package raftnode

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Errors a node returns. The HTTP layer maps each to one status code.
var (
	// ErrNotLeader: this node cannot decide; the leader (if known) can.
	ErrNotLeader = errors.New("not the leader")
	// ErrNoLeader: no leader is known (election in progress, quorum lost).
	ErrNoLeader = errors.New("no leader")
	// ErrIndeterminate: leadership was lost while the entry was in flight;
	// nobody knows whether it committed. Retrying with the same lease id is safe.
	ErrIndeterminate = errors.New("outcome unknown: leadership lost during the write")
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

// raftError translates hashicorp/raft's errors into the node's own.
func raftError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrNotVoter):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrIndeterminate
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNoLeader // refused before it was logged: safe to retry
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return ErrOverloaded
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	}
	return fmt.Errorf("%s: %w", op, err)
}
