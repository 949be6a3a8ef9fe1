// Package client is the Go client of raftlock, a distributed lock service.
//
// A Client is given any nodes of the cluster; it finds the leader from the
// X-Raftlock-Leader header and the node list of /v1/cluster, sends writes to
// it directly, and moves to another node on connection errors, 503 and 429
// (honouring Retry-After) with jittered exponential backoff. The caller's
// context bounds every call, retries included.
//
// Acquire and TryAcquire return a *Lease that renews itself in the
// background about every TTL/3 until Release. Its Context is cancelled, and
// Lost closed, the moment the lease can no longer be trusted: the server
// answered not_holder, or the local deadline (send time of the last
// successful acquire or renew + TTL × (1 − drift), on the local monotonic
// clock) passed before a renewal succeeded. Work done under the lock should
// run under that context and pass Token, the fencing token, to the storage it
// writes. WithLock does all of that for the common case.
//
// A Session (NewSession) ties many leases to one watchdog: leases taken
// with Session.Acquire have none of their own, and are lost or released
// together with the session. AcquireOptions.Shared takes a lock in shared
// mode. AcquireSemaphore and TrySemaphore take a *Permit, one of a
// semaphore's limit slots, whose token rises per slot: fence it per
// (semaphore, slot) with client/fence's AdvancePermit.
//
// AttachSession keeps alive a session made elsewhere (another process,
// raftlock session create) and takes leases in it; Session.Detach leaves it
// to its maker.
//
// A lease or session whose options name no owner takes the client's owner:
// the host name, as the raftlock command line's --owner, unless WithOwner
// says otherwise (WithOwner("") sends none). Others see it in reads and in
// held and full answers.
//
// The client chooses each lease's id itself, so an acquire resent after a
// timeout or a leader change is idempotent: it gets the same lease and token
// rather than locking its own caller out.
//
// One Client is meant to be shared by a process's goroutines: the acquires
// (without waiting), renews and releases they make while a batch, or two
// lone calls, are under way with a node go to the node together in one
// POST /v1/batch, each answered as it would have been alone
// (WithCoalescing(false) turns it off). Under load this saves the
// nodes most of their CPU per call; a lone call is never held back.
//
// A 503 or 429 promises that nothing was applied. A 504 unknown_outcome, or a
// connection that fails after the request went out, does not: the write may
// have been applied and may still be. Acquire, renew and release are then
// resent with the same lease id (a release answered not_holder after such a
// failure counts as done), and if the caller's context ends first the error
// matches ErrUnknownOutcome. The HTTP contract is docs/API.md in the
// repository.
package client
