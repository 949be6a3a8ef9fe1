package api

// Lock modes: the "mode" of an acquire and of the answers that show one.
const (
	// ModeExclusive (the default): the only holder of the lock.
	ModeExclusive = "exclusive"
	// ModeShared: holders in shared mode coexist; an exclusive hold
	// excludes them all.
	ModeShared = "shared"
)

// Kinds of a session's leases (SessionLease.Kind).
const (
	LeaseKindLock      = "lock"
	LeaseKindSemaphore = "semaphore"
)

// MaxLeasesPerSession is the most leases one session may hold at once
// (409 session_full beyond): one session's expiry ends all of its leases in
// one log entry, and this keeps that entry within the per-entry settle cap.
const MaxLeasesPerSession = 4096

// SessionCreateRequest is the body of POST /v1/sessions. With SessionID
// the call is idempotent: a retry by the same owner refreshes the session.
type SessionCreateRequest struct {
	Owner string `json:"owner,omitempty"`
	// TTLMs is required: MinTTLMs to MaxTTLMs.
	TTLMs int64 `json:"ttl_ms"`
	// LockDelayMs applies to the session's exclusive locks when the
	// session expires (not on close): 0 to MaxLockDelayMs.
	LockDelayMs int64 `json:"lock_delay_ms,omitempty"`
	// SessionID, when empty, is made by the leader (NewLeaseID); the same
	// rule as a lease id (ValidLeaseID).
	SessionID string `json:"session_id,omitempty"`
}

// SessionRenewRequest is the body of POST /v1/sessions/renew.
type SessionRenewRequest struct {
	SessionID string `json:"session_id"`
	// TTLMs, when nil, keeps the session's TTL.
	TTLMs *int64 `json:"ttl_ms,omitempty"`
}

// SessionCloseRequest is the body of POST /v1/sessions/close.
type SessionCloseRequest struct {
	SessionID string `json:"session_id"`
}

// Session answers a session create or renew with 200. Like Lease, it shows
// the secret id only to the client that holds it.
type Session struct {
	SessionID   string `json:"session_id"`
	Owner       string `json:"owner"`
	TTLMs       int64  `json:"ttl_ms"`
	LockDelayMs int64  `json:"lock_delay_ms"`
}

// SessionClosed answers a session close with 200: Released is how many
// leases the close ended.
type SessionClosed struct {
	Closed   bool `json:"closed"` // true
	Released int  `json:"released"`
}

// SessionInfo answers GET /v1/sessions/{id}: the session and its leases
// (never their lease ids).
type SessionInfo struct {
	SessionID   string `json:"session_id"`
	Owner       string `json:"owner"`
	TTLMs       int64  `json:"ttl_ms"`
	LockDelayMs int64  `json:"lock_delay_ms"`
	// RemainingMs: the session's time left, as Lock.RemainingMs (only in
	// reads answered by the leader).
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
	// Index is the Raft index of the entry that last changed the session.
	Index  uint64         `json:"index"`
	Leases []SessionLease `json:"leases"`
}

// SessionLease is one lease of a session: locks first, then semaphore
// permits, each by name.
type SessionLease struct {
	Kind         string `json:"kind"` // LeaseKindLock or LeaseKindSemaphore
	Name         string `json:"name"`
	FencingToken uint64 `json:"fencing_token"`
	// Mode: ModeShared for a shared lock; absent otherwise.
	Mode string `json:"mode,omitempty"`
	// Slot is a permit's slot; absent for a lock.
	Slot *int `json:"slot,omitempty"`
}
