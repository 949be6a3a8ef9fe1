package raftnode

import (
	"context"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Bounds on parked acquires, so a crowd of waiters costs bounded memory.
const (
	DefaultMaxWaitersPerLock = 10_000
	DefaultMaxWaiters        = 100_000
)

// waitQueue parks acquires that asked to wait for a held lock, on the leader
// only, and grants the lock to them in arrival order as it frees. Each grant
// is an ordinary acquire entry with its own fencing token. Queues do not
// survive a leader change: parked requests get ErrLeaderChanged and clients
// re-enter the wait on the new leader with the same lease id.
type waitQueue struct {
	apply  func(fsm.Command) (fsm.Result, error)
	holder func(name string) (fsm.Lock, bool)
	// grantable says, from this leader's applied state, whether the log
	// could grant cmd now; only a hint (the log decides), used to keep
	// granting a run of waiters and to skip proposals bound to be refused.
	grantable func(cmd fsm.Command) bool
	// holds says whether cmd's lease holds what it asks for already.
	holds func(cmd fsm.Command) bool
	// refresh names the current holders in a refusal about to be answered.
	refresh func(cmd fsm.Command, r fsm.Result) fsm.Result
	// busy is the status of a refusal to wait through: held for locks,
	// full for semaphores.
	busy fsm.Status
	// runs: after a grant, go on granting the next waiters while they can
	// be granted too (shared readers, free permits). Without modes a
	// granted lock is taken, and the next free event serves the next.
	runs bool
	// sems parks semaphore acquires, keyed apart from locks (a semaphore
	// and a lock of one name are unrelated); nil when not serving them.
	sems       *waitQueue
	after      func(time.Duration) <-chan time.Time // the wait's timer; tests replace it
	left       func()                               // test hook: wait has tried to leave its queue
	maxPerLock int
	maxTotal   int

	mu        sync.Mutex
	locks     map[string]*lockQueue
	total     int
	closed    bool  // not leading: nothing may park
	closedErr error // what close answered parked requests with
}

type lockQueue struct {
	waiters  []*waiter
	granting bool // a serve is deciding or a grant for the head is in flight
	// dirty: a free event came while granting; the serve looks again
	// before it leaves, since nothing else would bring it back.
	dirty bool
}

type waiter struct {
	cmd  fsm.Command
	done chan waitResult // buffered: the dispatcher never blocks on it
}

type waitResult struct {
	r   fsm.Result
	err error
}

// newWaitQueue parks acquires of exclusive locks whose holder is read with
// holder.
func newWaitQueue(apply func(fsm.Command) (fsm.Result, error), holder func(string) (fsm.Lock, bool), perLock, total int) *waitQueue {
	q := &waitQueue{apply: apply, holder: holder, busy: fsm.StatusHeld, after: time.After, left: func() {}, maxPerLock: perLock, maxTotal: total, locks: map[string]*lockQueue{}, closed: true}
	q.grantable = func(cmd fsm.Command) bool {
		h, held := q.holder(cmd.Name)
		return !held || h.LeaseID == cmd.LeaseID
	}
	q.holds = func(cmd fsm.Command) bool {
		h, held := q.holder(cmd.Name)
		return held && h.LeaseID == cmd.LeaseID
	}
	q.refresh = func(cmd fsm.Command, r fsm.Result) fsm.Result {
		// Name the holder now; none when the lock is free but promised to
		// a waiter ahead (the first answer's holder may have released).
		r.Holder, _ = q.holder(cmd.Name)
		return r
	}
	return q
}

// queued reports whether anyone waits for name: an acquire that does not
// wait must not jump the queue.
func (q *waitQueue) queued(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.locks[name] != nil
}

// wait parks cmd until it is granted, the wait runs out (the last answer,
// held, is returned), ctx ends, or leadership is lost.
func (q *waitQueue) wait(ctx context.Context, cmd fsm.Command, held fsm.Result, wait time.Duration) (fsm.Result, error) {
	w := &waiter{cmd: cmd, done: make(chan waitResult, 1)}
	q.mu.Lock()
	switch lq := q.locks[cmd.Name]; {
	case q.closed:
		q.mu.Unlock()
		return fsm.Result{}, ErrNotLeader
	case q.total >= q.maxTotal || lq != nil && len(lq.waiters) >= q.maxPerLock:
		q.mu.Unlock()
		return fsm.Result{}, ErrOverloaded
	case lq == nil:
		q.locks[cmd.Name] = &lockQueue{waiters: []*waiter{w}}
	default:
		lq.waiters = append(lq.waiters, w)
	}
	q.total++
	q.mu.Unlock()
	// The lock may have freed between the held answer and parking.
	if q.grantable(cmd) {
		if seededWaiterLate {
			go q.serve(cmd.Name) // late (test builds only): not on this waiter's clock
		} else {
			q.serve(cmd.Name)
		}
	}

	select {
	case res := <-w.done:
		return answer(ctx, res)
	case <-q.after(wait):
	case <-ctx.Done():
	}
	inQueue := q.leave(w)
	q.left()
	if inQueue {
		if err := ctx.Err(); err != nil {
			return fsm.Result{}, err
		}
		if q.holds(cmd) {
			// The lease holds the lock already (an earlier attempt of the
			// same lease was granted while this one waited): an acquire by
			// the holding lease is idempotent, so answer it as one, through
			// the log, which refreshes the lease like any retry.
			res, err := q.apply(cmd)
			return answer(ctx, waitResult{r: res, err: err})
		}
		refused := q.refresh(cmd, held)
		if q.busy == fsm.StatusFull && len(refused.Holders) == 0 {
			// A full answer lists who holds the permits; with nobody
			// holding one it would be false. The log answers instead: the
			// grant, or full with whoever took the permits meanwhile.
			res, err := q.apply(cmd)
			return answer(ctx, waitResult{r: res, err: err})
		}
		return refused, nil
	}
	// A grant for w is in flight (or just answered): the lock was granted
	// before we could say "held", so its answer decides and the grant stands.
	res := <-w.done
	if seededWaiterTimeoutRelease && res.err == nil && res.r.Status == fsm.StatusOK {
		// Seeded bug (test builds only): the old behaviour, which answered
		// a grant it had just released.
		q.apply(fsm.Command{Op: fsm.OpRelease, Name: cmd.Name, LeaseID: cmd.LeaseID})
	}
	return answer(ctx, res)
}

// answer is what a waiter is told. When its request's context has ended it
// gets the context's error, never a grant: a server-side deadline may still
// let the handler answer, and the error says "outcome unknown". The grant
// itself stands and is never released here: the caller may already be
// retrying with the same lease id elsewhere, and a release racing that retry
// would free a lock someone was just told they hold. An abandoned grant ends
// like any lease whose holder vanished: by release from the client's own
// clean-up, or at its TTL.
func answer(ctx context.Context, res waitResult) (fsm.Result, error) {
	if err := ctx.Err(); err != nil {
		return fsm.Result{}, err
	}
	return res.r, res.err
}

// leave takes w out of its queue; false means its grant is already in
// flight or answered (the answer is, or will be, in w.done).
func (q *waitQueue) leave(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	lq := q.locks[w.cmd.Name]
	if lq == nil {
		return false // answered or failed already; its result is in w.done
	}
	for i, x := range lq.waiters {
		if x != w {
			continue
		}
		if i == 0 && lq.granting {
			return false
		}
		lq.waiters = append(lq.waiters[:i], lq.waiters[i+1:]...)
		q.total--
		if len(lq.waiters) == 0 && !lq.granting {
			delete(q.locks, w.cmd.Name)
		}
		return true
	}
	return false
}

// freed is called (from the FSM observer) with locks that became free.
func (q *waitQueue) freed(names []string) {
	if len(names) == 0 {
		return
	}
	q.mu.Lock()
	var todo []string
	for _, name := range names {
		switch lq := q.locks[name]; {
		case lq == nil:
		case lq.granting:
			lq.dirty = true // the serve deciding may have read the state before this change
		default:
			todo = append(todo, name)
		}
	}
	q.mu.Unlock()
	for _, name := range todo {
		go q.serve(name)
	}
}

// serve grants name to the head of its queue. One grant is in flight per
// lock at a time; a held answer means someone else got there first (or a
// lock-delay runs), and the next free event brings us back. After a grant
// it goes on with the next waiter while that one can be granted too (a run
// of shared readers, several free permits), stopping at the first that
// cannot: FIFO across modes, so a writer is not overtaken by later readers.
func (q *waitQueue) serve(name string) {
	seededServeDelay() // waiter-late (test builds only)
	for {
		q.mu.Lock()
		lq := q.locks[name]
		if lq != nil && lq.granting {
			lq.dirty = true // the serve in progress looks again before it leaves
		}
		if lq == nil || lq.granting || len(lq.waiters) == 0 || q.closed {
			q.mu.Unlock()
			return
		}
		w := lq.waiters[0]
		// Every state read below comes after this: a change applied before
		// it is seen, one applied after it sets dirty again.
		lq.granting, lq.dirty = true, false
		q.mu.Unlock()

		var res fsm.Result
		var err error
		if q.grantable(w.cmd) {
			res, err = q.apply(w.cmd)
		} else {
			// Bound to be refused (a shared holder left, others remain):
			// no entry; the next free event brings us back.
			res.Status = q.busy
		}

		q.mu.Lock()
		lq.granting = false
		again := lq.dirty
		lq.dirty = false
		if err == nil && res.Status == q.busy {
			if !q.closed {
				q.mu.Unlock()
				if again {
					continue // freed while deciding: the head may be grantable now
				}
				return
			}
			// Leadership ended while the grant was in flight and close left
			// the head to it: send it to the new leader rather than leave it
			// parked here until its wait runs out.
			err = q.closedErr
		}
		lq.waiters = lq.waiters[1:]
		q.total--
		if len(lq.waiters) == 0 {
			delete(q.locks, name)
		}
		q.mu.Unlock()

		w.done <- waitResult{r: res, err: err}
		if err == nil && res.Status == fsm.StatusOK && !again && (!q.runs || !q.nextGrantable(name)) {
			return // the lock is taken: wait for the next free event
		}
		// An error (overloaded, say) answers only the head: the lock may
		// still be free, and no free event will come for the rest. The loop
		// tries the next; a queue closed by lost leadership stops it.
	}
}

// nextGrantable says whether name's next waiter can be granted now too.
func (q *waitQueue) nextGrantable(name string) bool {
	q.mu.Lock()
	lq := q.locks[name]
	if lq == nil || len(lq.waiters) == 0 {
		q.mu.Unlock()
		return false
	}
	next := lq.waiters[0].cmd
	q.mu.Unlock()
	return q.grantable(next)
}

// open lets requests park; the node calls it when it starts leading.
func (q *waitQueue) open() {
	q.mu.Lock()
	q.closed = false
	q.mu.Unlock()
	if q.sems != nil {
		q.sems.open()
	}
}

// close fails every parked request with err and refuses new ones; the node
// calls it when leadership ends.
func (q *waitQueue) close(err error) {
	if q.sems != nil {
		q.sems.close(err)
	}
	q.mu.Lock()
	q.closed, q.closedErr = true, err
	var failed []*waiter
	inFlight := 0
	for name, lq := range q.locks {
		if lq.granting {
			// The head's grant is in flight and will answer it.
			failed = append(failed, lq.waiters[1:]...)
			lq.waiters = lq.waiters[:1]
			inFlight++
			continue
		}
		failed = append(failed, lq.waiters...)
		delete(q.locks, name)
	}
	q.total = inFlight
	q.mu.Unlock()
	for _, w := range failed {
		w.done <- waitResult{err: err}
	}
}

// size returns how many requests are parked (semaphores' included).
func (q *waitQueue) size() int {
	n := 0
	if q.sems != nil {
		n = q.sems.size()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return n + q.total
}

// freedSemaphores serves the semaphores that got a free permit.
func (q *waitQueue) freedSemaphores(names []string) {
	if q.sems != nil {
		q.sems.freed(names)
	}
}

// parkedNames returns the locks (in a semaphore queue: the semaphores)
// someone waits for.
func (q *waitQueue) parkedNames() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	names := make([]string, 0, len(q.locks))
	for name := range q.locks {
		names = append(names, name)
	}
	return names
}
