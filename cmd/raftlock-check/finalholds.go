package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/cmd/raftlock-check/workload"
)

// finishHolds is the closing check of (h) and (i): nothing leaks. Once the
// clients have stopped, every session they left ends by its TTL (at most
// 3 s) and every lease and permit by its own, so each rw lock must be
// acquirable exclusively, and each semaphore must grant all `limit` of its
// permits, within a 15 s wait. A lock or permit granted to a session that
// had already ended (a close racing a parked acquire), or one that its
// session's expiry skipped, would stay held for ever and fail here; so
// would a permit the semaphore lost count of. The checker's own holds are
// released afterwards.
func (r *runner) finishHolds(ctx context.Context, cl *workload.Client) {
	deadline := time.Now().Add(60 * time.Second) // for all of them: 15 s waits, and retries
	unsupported := false
	acquire := func(e history.Entry, path string, body map[string]any) history.Entry {
		var got history.Entry
		for ctx.Err() == nil && time.Now().Before(deadline) {
			got = cl.Call(e, path, body)
			switch got.Outcome {
			case history.OK, history.Held, history.Full, history.Fail:
				return got
			}
			// limit_mismatch: a permit with another limit is still held
			// (by TTL at most 3 s); unknown: resend, same lease id.
			time.Sleep(300 * time.Millisecond)
		}
		unsupported = unsupported || strings.Contains(got.Err, "not_supported_yet")
		return got
	}
	defer func() {
		if unsupported {
			// A cluster that never accepts the new commands leaks nothing:
			// it is not a safety violation, and the run says so.
			r.holdErrs, r.holdNote = nil, "the cluster answered not_supported_yet to the closing holds for 60 s"
		}
	}()
	for i, name := range r.cfg.rwLocks() {
		lease := fmt.Sprintf("final-rw-%02d-%012d", i, r.cfg.seed)
		got := acquire(history.Entry{Op: history.Acquire, Name: name, Lease: lease, TTLMs: 60000, WaitMs: 15000}, "/v1/locks/acquire",
			map[string]any{"name": name, "owner": "final", "ttl_ms": 60000, "lease_id": lease, "wait_ms": 15000})
		if got.Outcome != history.OK {
			r.holdErrs = append(r.holdErrs, model.Violation{Property: "h", Detail: fmt.Sprintf("lock %q could not be taken exclusively within 15 s of the workload's end (every session and lease should have ended): %s %s", name, got.Outcome, got.Err)})
			continue
		}
		cl.Call(history.Entry{Op: history.Release, Name: name, Lease: lease}, "/v1/locks/release", map[string]any{"name": name, "lease_id": lease})
	}
	sems := r.cfg.semaphores()
	for _, name := range sortedNames(sems) {
		limit := sems[name]
		var leases []string
		for k := int64(0); k < limit; k++ {
			lease := fmt.Sprintf("final-sem-%s-%d-%012d", name[len("sem/"):], k, r.cfg.seed)
			got := acquire(history.Entry{Op: history.SemAcquire, Name: name, Lease: lease, TTLMs: 60000, WaitMs: 15000, Limit: limit}, "/v1/semaphores/acquire",
				map[string]any{"name": name, "owner": "final", "limit": limit, "ttl_ms": 60000, "lease_id": lease, "wait_ms": 15000})
			if got.Outcome != history.OK {
				r.holdErrs = append(r.holdErrs, model.Violation{Property: "i", Detail: fmt.Sprintf("semaphore %q granted only %d of its %d permits within 15 s of the workload's end: %s %s", name, k, limit, got.Outcome, got.Err)})
				break
			}
			leases = append(leases, lease)
		}
		for _, lease := range leases {
			cl.Call(history.Entry{Op: history.SemRelease, Name: name, Lease: lease}, "/v1/semaphores/release", map[string]any{"name": name, "lease_id": lease})
		}
	}
	r.logf("closing holds: %d rw locks and %d semaphores checked for leaks, %d found", len(r.cfg.rwLocks()), len(sems), len(r.holdErrs))
}

func sortedNames(m map[string]int64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
