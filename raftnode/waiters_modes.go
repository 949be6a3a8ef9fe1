package raftnode

import (
	"sort"

	"github.com/raftlock/raftlock/fsm"
)

// newNodeWaiters is the node's queue of parked acquires: locks in any
// mode, read from the machine, and semaphores in a queue of their own.
func newNodeWaiters(apply func(fsm.Command) (fsm.Result, error), m *fsm.Machine, perLock, total int) *waitQueue {
	q := newWaitQueue(apply, m.Get, perLock, total)
	q.runs = true
	q.grantable = func(cmd fsm.Command) bool { return lockGrantable(m.Holders(cmd.Name), cmd) }
	q.holds = func(cmd fsm.Command) bool { return holdsLease(m.Holders(cmd.Name), cmd.LeaseID) }
	q.refresh = func(cmd fsm.Command, r fsm.Result) fsm.Result {
		// Name the holders now; none when the lock is free but promised to
		// a waiter ahead (the first answer's holder may have released).
		r.Holder, r.Holders = lockRefusal(m.Holders(cmd.Name))
		return r
	}

	s := newWaitQueue(apply, nil, perLock, total)
	s.busy, s.runs = fsm.StatusFull, true
	s.grantable = func(cmd fsm.Command) bool {
		sem, ok := m.Semaphore(cmd.Name)
		// A limit mismatch is answered by the log, not waited through.
		return !ok || sem.Limit != cmd.Limit || int64(len(sem.Holders)) < sem.Limit || holdsLease(sem.Holders, cmd.LeaseID)
	}
	s.holds = func(cmd fsm.Command) bool {
		sem, _ := m.Semaphore(cmd.Name)
		return holdsLease(sem.Holders, cmd.LeaseID)
	}
	s.refresh = func(cmd fsm.Command, r fsm.Result) fsm.Result {
		sem, _ := m.Semaphore(cmd.Name)
		r.Holders = byToken(sem.Holders)
		return r
	}
	q.sems = s
	return q
}

// lockGrantable: the lock is free (or in lock-delay: the log answers
// with the time left), held shared and cmd asks shared, or held by cmd's
// own lease (a retry).
func lockGrantable(holders []fsm.Lock, cmd fsm.Command) bool {
	if len(holders) == 0 || holdsLease(holders, cmd.LeaseID) {
		return true
	}
	return cmd.Mode == fsm.ModeShared && holders[0].Mode == fsm.ModeShared
}

func holdsLease(holders []fsm.Lock, leaseID string) bool {
	for _, h := range holders {
		if h.LeaseID == leaseID {
			return true
		}
	}
	return false
}

// lockRefusal is the holder (the lowest token) and, for a shared lock,
// every holder, as a held answer carries them.
func lockRefusal(holders []fsm.Lock) (fsm.Lock, []fsm.Lock) {
	if len(holders) == 0 {
		return fsm.Lock{}, nil
	}
	if holders[0].Mode == fsm.ModeShared {
		return holders[0], holders
	}
	return holders[0], nil
}

// byToken sorts permits as a full answer lists them.
func byToken(holders []fsm.Lock) []fsm.Lock {
	sort.Slice(holders, func(i, j int) bool { return holders[i].Token < holders[j].Token })
	return holders
}

// queueFor is the queue an acquire parks in.
func (q *waitQueue) queueFor(op fsm.Op) *waitQueue {
	if op == fsm.OpSemAcquire && q.sems != nil {
		return q.sems
	}
	return q
}
