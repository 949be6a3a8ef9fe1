package api

// MaxSemaphoreLimit bounds a semaphore's limit (its number of permits).
const MaxSemaphoreLimit = 1024

// SemaphoreAcquireRequest is the body of POST /v1/semaphores/acquire.
// Semaphores have their own namespace: semaphore "a" and lock "a" are
// unrelated. Names follow the lock-name rules.
type SemaphoreAcquireRequest struct {
	Name string `json:"name"`
	// Limit is required: 1 to MaxSemaphoreLimit. The first holder sets it;
	// while anyone holds a permit, another limit is 409 limit_mismatch.
	Limit int64  `json:"limit"`
	Owner string `json:"owner,omitempty"`
	// Exactly one of TTLMs and SessionID, as for a lock acquire.
	TTLMs     *int64 `json:"ttl_ms,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	// LeaseID, when empty, is made by the leader. A retry with the same
	// lease id while it holds a permit answers the same slot and token.
	LeaseID string `json:"lease_id,omitempty"`
	WaitMs  int64  `json:"wait_ms,omitempty"`
}

// SemaphoreRenewRequest is the body of POST /v1/semaphores/renew.
type SemaphoreRenewRequest struct {
	Name    string `json:"name"`
	LeaseID string `json:"lease_id"`
	// TTLMs, when nil, keeps the permit's TTL.
	TTLMs *int64 `json:"ttl_ms,omitempty"`
}

// SemaphoreReleaseRequest is the body of POST /v1/semaphores/release.
type SemaphoreReleaseRequest struct {
	Name    string `json:"name"`
	LeaseID string `json:"lease_id"`
}

// Permit answers a semaphore acquire or renew with 200. FencingToken is
// larger than every earlier token of the same (name, slot): storage fences
// per slot. Like Lease, it is the only body that shows the lease id.
type Permit struct {
	Name         string `json:"name"`
	Owner        string `json:"owner"`
	LeaseID      string `json:"lease_id"`
	Slot         int    `json:"slot"`
	FencingToken uint64 `json:"fencing_token"`
	Limit        int64  `json:"limit"`
	// TTLMs is the session's TTL for a permit of a session.
	TTLMs     int64  `json:"ttl_ms"`
	SessionID string `json:"session_id,omitempty"`
}

// PermitHolder is a permit as a full answer shows it.
type PermitHolder struct {
	Owner        string `json:"owner"`
	Slot         int    `json:"slot"`
	FencingToken uint64 `json:"fencing_token"`
}

// FullError is the 409 full answer to a semaphore acquire: every permit
// is held. Holders lists the first MaxErrorHolders of them by slot, and
// HoldersTotal counts them all.
type FullError struct {
	Error        string         `json:"error"` // CodeFull
	Message      string         `json:"message"`
	Holders      []PermitHolder `json:"holders"`
	HoldersTotal int            `json:"holders_total"`
}

// LimitMismatchError is the 409 limit_mismatch answer: the semaphore is
// held with another limit, Limit.
type LimitMismatchError struct {
	Error   string `json:"error"` // CodeLimitMismatch
	Message string `json:"message"`
	Limit   int64  `json:"limit"`
}

// Semaphore answers GET /v1/semaphores/{name}. Nobody holding a permit is
// 200 with Limit 0 and no holders (not 404).
type Semaphore struct {
	Name    string            `json:"name"`
	Limit   int64             `json:"limit"`
	Holders []SemaphoreHolder `json:"holders"`
	// Index is the Raft index of the entry that last changed the semaphore.
	Index uint64 `json:"index"`
	// Waiters: acquires parked for the semaphore on the leader; absent
	// when none, or when a follower answered.
	Waiters int `json:"waiters,omitempty"`
}

// SemaphoreHolder is one permit as reads show it (never its lease_id).
type SemaphoreHolder struct {
	Owner        string `json:"owner"`
	Slot         int    `json:"slot"`
	FencingToken uint64 `json:"fencing_token"`
	TTLMs        int64  `json:"ttl_ms"`
	// RemainingMs: as Lock.RemainingMs.
	RemainingMs *int64 `json:"remaining_ms,omitempty"`
}
