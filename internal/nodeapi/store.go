// Package nodeapi is what the HTTP layer (httpapi) and the Raft node
// (raftnode) agree on without importing each other: the errors a node
// returns, the status it reports, and the read-only view of its locks. It
// knows no Raft and no HTTP, so that httpapi can be built and tested
// without hashicorp/raft, and raftnode without the API.
//
// raftnode re-exports the errors (raftnode.ErrNotLeader is ErrNotLeader)
// and the types, so its callers need not import this package.
package nodeapi

import (
	"errors"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Errors a node returns. httpapi maps each to one status code
// (httpapi/errors.go). Each says whether the command may have been applied:
// only ErrIndeterminate (and errors wrapping it) and ErrStorage leave that
// open; the others mean nothing was applied.
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
	// ErrDiverged: this node's state differed from the leader's at a state
	// check; it serves no reads and accepts no writes until an operator acts.
	ErrDiverged = errors.New("this node's state diverged from the leader's; it needs an operator")
	// ErrStorage: this node's disk refused a write (full, read-only, failing).
	// The client sees only this; the node logs the real error with its path.
	ErrStorage = errors.New("storage error on this node")
	// ErrUnsafeChange: a membership change would leave fewer healthy voters
	// than a quorum, so the cluster could not elect a leader or commit
	// afterwards.
	ErrUnsafeChange = errors.New("unsafe membership change")
	// ErrNotSupportedYet: the command needs a log command format that not
	// every member reads yet (a member runs an older build, or the leader
	// has not surveyed its members in this term); the leader refused it
	// before writing anything. Upgrading every node lifts it.
	ErrNotSupportedYet = errors.New("not supported by every node yet")
	// ErrNoSuccessor: a leadership transfer found no other voter to hand
	// leadership to (a single-node cluster, or one whose other members are
	// all non-voters). Nothing changed.
	ErrNoSuccessor = errors.New("no other voter to hand leadership to")
	// ErrLeadsAlready: a leadership transfer named the node that leads.
	// Nothing changed, which is what was asked.
	ErrLeadsAlready = errors.New("the named node leads already")
)

// LockReader is the read-only view of a node's locks that reads are
// answered from. It has no way to change state: every change goes through
// Raft.
type LockReader interface {
	// Get returns lock name if it is held.
	Get(name string) (fsm.Lock, bool)
	// List returns up to limit held locks whose names start with prefix,
	// sorted by name, and whether more matched.
	List(prefix string, limit int) ([]fsm.Lock, bool)
	// Index returns the index of the entry that last changed lock name,
	// held or free (fsm.Machine.Index); blocking reads wait for it to rise.
	Index(name string) uint64
	// PrefixIndex returns the highest such index under prefix.
	PrefixIndex(prefix string) uint64
	// Lookup is Get and Index read at one point of the log, and ListIndexed
	// is List and PrefixIndex: an answer must pair a state with its own
	// index (fsm.Machine.Lookup).
	Lookup(name string) (l fsm.Lock, held bool, index uint64)
	ListIndexed(prefix string, limit int) ([]fsm.Lock, bool, uint64)
	// Holders returns every lease holding lock name, by token (several
	// for a shared lock); Get returns the first.
	Holders(name string) []fsm.Lock
	// LookupHolders is Holders and Index read at one point of the log
	// (fsm.Machine.LookupHolders), for the same reason as Lookup.
	LookupHolders(name string) (holders []fsm.Lock, index uint64)
	// Session returns a live session (fsm.Machine.Session).
	Session(id string) (fsm.Session, bool)
	// Semaphore returns a semaphore while anyone holds a permit of it.
	Semaphore(name string) (fsm.Semaphore, bool)
}

// LeaseView is what a leader's LockReader adds, for reads to show: a held
// lock's time left and the acquires parked for it. Readers that cannot say
// (a follower's stale view, test fakes) do not implement it; httpapi asks
// by type assertion.
type LeaseView interface {
	// Remaining is l's deadline on the FSM clock minus the leader's
	// projection of that clock now (at least 0), and false when this node
	// cannot project it (not leading, or no stamp of its term yet).
	Remaining(l fsm.Lock) (time.Duration, bool)
	// Waiters is how many acquires are parked for name on this leader.
	Waiters(name string) int
	// SemaphoreWaiters is how many acquires are parked for semaphore name
	// on this leader (semaphores and locks have separate names).
	SemaphoreWaiters(name string) int
}

// Status describes the cluster as a node sees it.
type Status struct {
	ID           string // this node's id
	Leader       string
	Term         uint64
	LastIndex    uint64 // the last index in this node's log
	CommitIndex  uint64
	AppliedIndex uint64
	ClusterID    string // "" before the first leader wrote one
	Nodes        []NodeInfo
}

// NodeInfo is one member of the Raft configuration.
type NodeInfo struct {
	ID       string
	RaftAddr string
	HTTPAddr string
	Voter    bool
	Leader   bool
}
