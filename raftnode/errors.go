package raftnode

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// Errors a node returns, declared in internal/nodeapi so that the HTTP layer
// can map them without importing raftnode (and Raft); see there for what
// each promises. Each says whether the command may have been applied: only
// ErrIndeterminate (and errors wrapping it) and ErrStorage leave that open;
// the others mean nothing was applied.
var (
	ErrNotLeader     = nodeapi.ErrNotLeader
	ErrNoLeader      = nodeapi.ErrNoLeader
	ErrIndeterminate = nodeapi.ErrIndeterminate
	ErrLeaderChanged = nodeapi.ErrLeaderChanged
	ErrOverloaded    = nodeapi.ErrOverloaded
	ErrShutdown      = nodeapi.ErrShutdown
	ErrUnknownNode   = nodeapi.ErrUnknownNode
	// ErrDiverged: a state check found this node's state different from
	// the leader's (integrity.go).
	ErrDiverged = nodeapi.ErrDiverged
	// ErrStorage: this node's disk refused a write (logstore.GuardWrites).
	ErrStorage = nodeapi.ErrStorage
	// ErrNotSupportedYet: the command needs a command format the format rule does
	// not allow yet (cmdversion.go).
	ErrNotSupportedYet = nodeapi.ErrNotSupportedYet
	// ErrNoSuccessor, ErrLeadsAlready: a leadership transfer that changed
	// nothing (membership.go).
	ErrNoSuccessor  = nodeapi.ErrNoSuccessor
	ErrLeadsAlready = nodeapi.ErrLeadsAlready
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
	case errors.Is(err, raft.ErrAbortedByRestore) && write:
		// Writes wait while a restore installs (appendMu), so this needs an
		// entry raft had in flight as the restore began; it is not applied,
		// but saying so would rest on raft's bookkeeping of in-flight
		// entries, so it is answered like any write lost in flight.
		return fmt.Errorf("%s: %w: a backup restore replaced the state with the entry in flight", op, ErrIndeterminate)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return ErrOverloaded // never reached the log
	case errors.Is(err, raft.ErrRaftShutdown) && write:
		return fmt.Errorf("%s: %w: raft shut down with the entry in flight (%w)", op, ErrIndeterminate, ErrShutdown)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	}
	return fmt.Errorf("%s: %w", op, err)
}
