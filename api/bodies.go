package api

// Request bodies. The server decodes them strictly (httpapi): unknown,
// duplicate or differently cased fields are 400. omitempty only shapes what
// a sender writes; a field left out reads as its zero value, except for the
// pointers, where nil means "not given".

// AcquireRequest is the body of POST /v1/locks/acquire.
type AcquireRequest struct {
	Name  string `json:"name"`
	Owner string `json:"owner,omitempty"`
	// TTLMs is required unless SessionID is given (exactly one of the
	// two): MinTTLMs to MaxTTLMs.
	TTLMs *int64 `json:"ttl_ms,omitempty"`
	// LeaseID, when empty, is made by the leader (NewLeaseID).
	LeaseID     string `json:"lease_id"`
	WaitMs      int64  `json:"wait_ms,omitempty"`
	LockDelayMs int64  `json:"lock_delay_ms,omitempty"`
	// Value is what the holder publishes with the lock (UTF-8, at most
	// MaxValue bytes), e.g. a leader's address; readers and watchers see it.
	Value string `json:"value,omitempty"`
	// Mode is ModeExclusive (the default, also when empty) or ModeShared.
	// A shared acquire takes no lock_delay_ms.
	Mode string `json:"mode,omitempty"`
	// SessionID, instead of TTLMs, ties the lease to a session: it has no
	// deadline of its own and ends when the session ends.
	SessionID string `json:"session_id,omitempty"`
}

// UpdateRequest is the body of POST /v1/locks/update: the holding lease
// replaces the lock's value (its token stays).
type UpdateRequest struct {
	Name    string `json:"name"`
	LeaseID string `json:"lease_id"`
	Value   string `json:"value"`
}

// RenewRequest is the body of POST /v1/locks/renew.
type RenewRequest struct {
	Name    string `json:"name"`
	LeaseID string `json:"lease_id"`
	// TTLMs, when nil, keeps the lease's TTL.
	TTLMs *int64 `json:"ttl_ms,omitempty"`
}

// ReleaseRequest is the body of POST /v1/locks/release.
type ReleaseRequest struct {
	Name string `json:"name"`
	// LeaseID is required, except with Force, where it must be empty.
	LeaseID string `json:"lease_id,omitempty"`
	// Force (admin only) ends whatever lease holds the lock, as its expiry
	// would: its lock-delay starts. Needs command_version 3 on every node.
	Force bool `json:"force,omitempty"`
}

// JoinRequest is the body of POST /v1/cluster/join.
type JoinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

// LeaveRequest is the body of POST /v1/cluster/leave.
type LeaveRequest struct {
	ID string `json:"id"`
}

// TransferRequest is the body of POST /v1/cluster/transfer-leadership; an
// empty ID lets the leader pick.
type TransferRequest struct {
	ID string `json:"id,omitempty"`
}

// CheckStateRequest is the body of POST /v1/cluster/check-state: empty.
type CheckStateRequest struct{}

// Response bodies.

// Lease answers acquire and renew with 200. It is the only body that shows
// a lease_id, and only to the client that holds the lease.
type Lease struct {
	Name         string `json:"name"`
	Owner        string `json:"owner"`
	LeaseID      string `json:"lease_id"`
	FencingToken uint64 `json:"fencing_token"`
	// TTLMs is the session's TTL for a lease of a session.
	TTLMs int64 `json:"ttl_ms"`
	// SessionID is the session the lease belongs to; absent for a lease
	// with a TTL of its own.
	SessionID string `json:"session_id,omitempty"`
	// Mode is ModeShared for a shared hold; absent for exclusive.
	Mode string `json:"mode,omitempty"`
}

// Error is every error answer: {"error": code, "message": text}.
type Error struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	// RetryAfterMs is set on every 429 overloaded: when to try again (as
	// Retry-After, in milliseconds).
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

// Holder is the lease that holds a lock, as a held answer shows it.
type Holder struct {
	Owner        string `json:"owner"`
	FencingToken uint64 `json:"fencing_token"`
}

// HeldError is the 409 held answer to an acquire.
type HeldError struct {
	Error   string `json:"error"` // CodeHeld
	Message string `json:"message"`
	Holder  Holder `json:"holder"`
	// RetryAfterMs is set during a lock delay: when the lock may be taken.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Holders lists the holders, by token, when the lock is held shared
	// (Holder is then the first of them): the first MaxErrorHolders, and
	// HoldersTotal counts them all. Both absent otherwise.
	Holders      []Holder `json:"holders,omitempty"`
	HoldersTotal int      `json:"holders_total,omitempty"`
}

// Released answers a release with 200: {"released": true}. A force
// release answers true and the lease it ended as Holder, or false (no
// holder) when no lease held the lock (free, or in its lock-delay).
type Released struct {
	Released bool    `json:"released"`
	Holder   *Holder `json:"holder,omitempty"`
}

// Lock is a held lock as reads show it: never with its lease_id. A read of a
// free lock answers FreeLock; a client may decode both into Lock.
type Lock struct {
	Name         string `json:"name"`
	Held         bool   `json:"held"`
	Owner        string `json:"owner"`
	FencingToken uint64 `json:"fencing_token"`
	TTLMs        int64  `json:"ttl_ms"`
	// Value is what the holder published (acquire's or update's value).
	Value string `json:"value,omitempty"`
	// RemainingMs is the lease's time left, on the leader's projection of
	// the FSM clock; only in reads answered by the leader (linearizable
	// reads, and stale reads that reach the leader).
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
	// Waiters is how many acquires are parked for the lock on the leader;
	// absent when none are, or the read was answered by a follower.
	Waiters int `json:"waiters,omitempty"`
	// Index is the Raft index of the entry that last changed the lock
	// (grant, a renew that changed the TTL, value update, release, expiry);
	// blocking reads wait for it to pass a given index.
	Index uint64 `json:"index"`
	// Mode is ModeShared when the lock is held shared: Owner, FencingToken
	// and TTLMs are then the lowest-token holder's, and Holders lists
	// every holder. Both absent for an exclusive hold.
	Mode    string       `json:"mode,omitempty"`
	Holders []LockHolder `json:"holders,omitempty"`
}

// LockHolder is one holder of a shared lock, as reads show it (never
// with its lease_id or session_id).
type LockHolder struct {
	Owner        string `json:"owner"`
	FencingToken uint64 `json:"fencing_token"`
	TTLMs        int64  `json:"ttl_ms"`
	// RemainingMs: as Lock.RemainingMs.
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
}

// FreeLock is the answer of GET /v1/locks/{name} for a lock nobody holds.
type FreeLock struct {
	Name string `json:"name"`
	Held bool   `json:"held"` // false
	// Index: the entry that freed it (release, expiry, end of lock-delay);
	// 0 for a lock never held (or whose last change was forgotten: see
	// docs/API.md, blocking reads).
	Index uint64 `json:"index"`
}

// LockList answers GET /v1/locks: held locks sorted by name.
type LockList struct {
	Locks     []Lock `json:"locks"`
	Truncated bool   `json:"truncated"` // more locks match than were returned
	// Index is the highest index of any change under the prefix, held or
	// freed: a blocking list waits for it to pass a given index.
	Index uint64 `json:"index"`
}

// Cluster answers GET /v1/cluster: the answering node's view. Members also
// read it from each other as their progress (ID, Leader, Term, LastIndex).
type Cluster struct {
	ID           string `json:"id"` // the answering node
	Leader       string `json:"leader"`
	Term         uint64 `json:"term"`
	LastIndex    uint64 `json:"last_index"` // the last index in its log
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// CommandVersion is the highest log command format the answering node
	// understands; absent (0) from older builds.
	CommandVersion uint8 `json:"command_version,omitempty"`
	// ClusterID is the cluster's id, as the answering node's state holds
	// it (the one its backups carry); absent before the first leader wrote
	// one, and from older builds.
	ClusterID string `json:"cluster_id,omitempty"`
	Nodes     []Node `json:"nodes"`
}

// Node is one member of the cluster in Cluster.
type Node struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
}

// Members answers GET /v1/cluster/members: each member's own view, asked
// by the answering node over the members' APIs.
type Members struct {
	Members []Member `json:"members"`
}

// Member is one member in Members. Term, indexes and Ready are what the
// member itself answered; all are zero when it was not reachable (Error
// says why).
type Member struct {
	ID           string `json:"id"`
	RaftAddr     string `json:"raft_addr"`
	HTTPAddr     string `json:"http_addr"`
	Voter        bool   `json:"voter"`
	Leader       bool   `json:"leader"` // in the answering node's configuration view
	Reachable    bool   `json:"reachable"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// Lag is the leader's last index minus this member's applied index;
	// absent when the leader or the member did not answer.
	Lag   *uint64 `json:"lag,omitempty"`
	Ready bool    `json:"ready"`
	Error string  `json:"error,omitempty"`
}

// Joined answers a join with 200.
type Joined struct {
	Joined string `json:"joined"`
}

// Left answers a leave with 200.
type Left struct {
	Left string `json:"left"`
}

// Transferred answers a leadership transfer with 200: the new leader's id,
// "" if the old leader had not heard the winner in time. A transfer to the
// node that leads already changes nothing: Leader is that node and Message
// says so.
type Transferred struct {
	Leader  string `json:"leader"`
	Message string `json:"message,omitempty"`
}

// StateChecked answers POST /v1/cluster/check-state with 200: the index
// at which every replica hashes its state. Each replica compares its hash
// with the leader's as it applies the next check entry; one that differs
// reports state_diverged and is not ready from then on.
type StateChecked struct {
	Index uint64 `json:"index"`
}

// Health answers GET /healthz: {"status": "ok"}.
type Health struct {
	Status string `json:"status"`
}

// Ready answers GET /readyz, with 200 when true and 503 when false.
type Ready struct {
	Ready bool `json:"ready"`
}
