// Package fsm is raftlock's deterministic lock state machine.
//
// Every replica applies the same log entries in the same order and so reaches
// the same state: Apply reads no clock, no random source and no network.
// Time enters only through the leader's monotonic stamp carried in each entry
// (see DESIGN.md); fencing tokens are the Raft indexes of granting entries.
package fsm

import (
	"container/heap"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Status is the outcome of a command. Outcomes are values, not errors: a lock
// that is held is a normal answer, replicated like any other.
type Status uint8

// Outcomes of Apply.
const (
	StatusOK        Status = iota
	StatusHeld             // acquire: someone else holds the lock (or its lock-delay runs)
	StatusNotHolder        // renew/release: the lease does not hold the lock
	StatusInvalid          // the command is well-formed bytes but meaningless
	// StatusNoSession: the session named is unknown or has ended.
	StatusNoSession
	// StatusFull: every permit of the semaphore is held (Result.Holders).
	StatusFull
	// StatusLimitMismatch: the semaphore is held with another limit
	// (Result.Limit is the current one).
	StatusLimitMismatch
	// StatusSessionFull: the session holds MaxLeasesPerSession leases.
	StatusSessionFull
)

func (s Status) String() string {
	names := [...]string{"ok", "held", "not_holder", "invalid", "no_session", "full", "limit_mismatch", "session_full"}
	if int(s) < len(names) {
		return names[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Bounds of sessions and semaphores. Replicas must agree on them: changing
// one is a log format change.
const (
	// MaxLeasesPerSession bounds one session's leases, so that its expiry
	// (which ends them all in one entry) fits MaxExpiriesPerEntry.
	MaxLeasesPerSession = 4096
	// MaxSemaphoreLimit bounds a semaphore's permits.
	MaxSemaphoreLimit = 1024
)

// Lock is the public view of a held lease. LeaseID is the holder's secret:
// callers that show a Lock to anyone but its holder must blank it.
type Lock struct {
	Name      string
	Owner     string
	LeaseID   string
	Token     uint64 // Raft index of the granting entry
	TTL       int64  // milliseconds
	LockDelay int64  // milliseconds, applied if the lease expires
	Deadline  int64  // FSM clock nanoseconds at which the lease expires
	Value     string // what the holder published with the lock
	// Index is the Raft index of the entry that last changed the lock as
	// readers see it: its grant, a renew or retried acquire that changed
	// the TTL, a value update, the expiry that started its lock-delay.
	Index uint64
	// SessionID is the session the lease belongs to ("": a lease with its
	// own TTL). A session's leases have no deadline of their own
	// (Deadline 0, TTL the session's) and end with the session.
	SessionID string
	// Mode is how a lock is held (shared holders coexist).
	Mode Mode
	// Slot is a semaphore permit's slot, 0..Limit-1.
	Slot int
	// Limit is the semaphore's number of permits; > 0 marks a permit.
	Limit int64
}

// Session ties leases to one keepalive: they end when it does.
type Session struct {
	ID        string // secret, like a lease id
	Owner     string
	TTL       int64 // milliseconds
	LockDelay int64 // milliseconds, applied to its exclusive locks if it expires
	Deadline  int64 // FSM clock nanoseconds at which it expires
	Index     uint64
	// Leases are the session's leases: locks, then permits, each by name.
	Leases []Lock
}

// Semaphore is a semaphore while anyone holds a permit of it.
type Semaphore struct {
	Name    string
	Limit   int64
	Holders []Lock // by slot
	Index   uint64 // entry that last changed it
}

// Result is what Apply returns for one command.
type Result struct {
	Status Status
	Lock   Lock  // StatusOK for acquire/renew: the lease as it now stands
	Holder Lock  // StatusHeld: who holds the lock, or held it before the running lock-delay
	Retry  int64 // StatusHeld during lock-delay: milliseconds until it ends
	// Freed lists locks that became acquirable during this entry (released,
	// expired without lock-delay, or at the end of a lock-delay), so the leader
	// can serve waiters.
	Freed []string
	// Expired counts leases that ran out during this entry.
	Expired int
	// Changed lists the locks whose index became this entry's (see
	// Machine.Index): what wakes blocking reads. A name may repeat.
	Changed []string
	// Holders: on StatusHeld for a shared lock and on StatusFull, every
	// holder, by token (permits: by slot).
	Holders []Lock
	// Limit: on StatusLimitMismatch, the semaphore's current limit.
	Limit int64
	// Session: the session as it now stands, for session ops with StatusOK,
	// without its leases (Leases nil: Machine.Session reads them).
	Session Session
	// Ended: for a session close, how many leases it ended.
	Ended int
	// FreedSemaphores lists semaphores that got a free permit during this
	// entry, so the leader can serve their waiters.
	FreedSemaphores []string
}

// Clock is the FSM's notion of time: nanoseconds built only from intervals one
// leader measured within its own term.
type Clock struct {
	Now   int64  // FSM clock, nanoseconds
	Term  uint64 // term whose stamps the clock is based on: that of the last entry whose stamp counted
	Stamp int64  // highest leader stamp seen in that term
	Index uint64 // last applied Raft index
}

// Machine is the lock state machine. It is safe for concurrent use: Apply
// takes the write lock, readers the read lock.
type Machine struct {
	mu       sync.RWMutex
	clock    Clock
	locks    map[string]*entry     // held or in lock-delay
	sems     map[string]*semaphore // while anyone holds a permit
	sessions map[string]*session
	timers   timerHeap         // every deadline: leases with a TTL, lock-delays, sessions
	held     int               // leases held: lock holders and permits
	nodes    map[string]string // node id -> HTTP address
	// tombs remembers, for locks that became free, the index at which they
	// did, so a blocking read on a freed lock sees its index rise; at most
	// maxTombs of them, the oldest pruned first, floor the highest index
	// pruned (DESIGN.md, "Lock indexes").
	tombs    map[string]*tomb
	tombQ    tombQueue // the same tombstones, oldest first (tombs.go)
	floor    uint64
	maxTombs int
	// tombTrace, set only by tests, hears every burial and unburial.
	tombTrace func(buried bool, name string, index uint64)
	// What the entry being applied did, collected for its Result.
	changed   []string
	freed     []string
	freedSems []string
	expired   int
	// maxExpiries is MaxExpiriesPerEntry, maxCommandExpiries
	// MaxExpiriesPerCommand; tests lower them to reach the caps with a
	// handful of locks. Replicas must agree on them.
	maxExpiries        int
	maxCommandExpiries int
	// format5 says the state was reached through a format 5 entry (or a
	// snapshot of such a state, which is written in version 3): no build
	// that cannot read format 5 can hold it (ProvenCommandVersion).
	format5 bool
}

// New returns an empty machine.
func New() *Machine {
	return &Machine{locks: make(map[string]*entry), sems: make(map[string]*semaphore), sessions: make(map[string]*session),
		nodes: make(map[string]string), tombs: make(map[string]*tomb),
		maxExpiries: MaxExpiriesPerEntry, maxCommandExpiries: MaxExpiriesPerCommand, maxTombs: MaxTombstones}
}

// MaxTombstones bounds how many freed locks keep their index (DESIGN.md,
// "Lock indexes"). Replicas must agree on it: changing it changes the state
// every replica computes, like MaxExpiriesPerEntry.
const MaxTombstones = 65536

// Apply decodes and applies the entry at index, written in term. An error
// means the bytes are not a command this version knows (ErrBadCommand, or
// ErrUnknownOp for a command introduced by a newer version); Raft callers
// must treat that as fatal, since replicas would otherwise diverge.
func (m *Machine) Apply(index, term uint64, data []byte) (Result, error) {
	cmd, err := DecodeCommand(data)
	if err != nil {
		return Result{}, err
	}
	return m.ApplyCommand(index, term, cmd), nil
}

// ApplyCommand applies a decoded command.
func (m *Machine) ApplyCommand(index, term uint64, c Command) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.Version >= commandVersion5 || MinVersion(c) >= commandVersion5 {
		m.format5 = true
	}
	m.advance(index, term, c)
	m.changed, m.freed, m.freedSems, m.expired = nil, nil, nil, 0
	m.expireDue(m.expiryBudget(c))
	// A command settles what it acts on whatever the cap left, so it acts
	// on it as of Now.
	switch c.Op {
	case OpAcquire, OpRenew, OpRelease, OpForceRelease, OpUpdate:
		m.settleLock(c.Name)
	case OpSemAcquire, OpSemRenew, OpSemRelease:
		m.settleSem(c.Name)
	}
	if c.SessionID != "" {
		m.settleSession(c.SessionID)
	}
	var r Result
	switch c.Op {
	case OpAcquire:
		r = m.acquire(index, c)
	case OpRenew:
		r = m.renew(c)
	case OpRelease:
		r = m.release(c)
	case OpForceRelease:
		r = m.forceRelease(c)
	case OpUpdate:
		r = m.update(c)
	case OpSessionCreate:
		r = m.sessionCreate(index, c)
	case OpSessionRenew:
		r = m.sessionRenew(index, c)
	case OpSessionClose:
		r = m.sessionClose(c)
	case OpSemAcquire:
		r = m.semAcquire(index, c)
	case OpSemRenew:
		r = m.semRenew(index, c)
	case OpSemRelease:
		r = m.semRelease(c)
	case OpTick:
	case OpSetNode:
		if c.NodeID == "" {
			r.Status = StatusInvalid
			break
		}
		m.nodes[c.NodeID] = c.NodeAddr
	case OpRemoveNode:
		delete(m.nodes, c.NodeID)
	default:
		// Unreachable through Apply: DecodeCommand refuses unknown ops, so
		// a replica never answers an entry another version would apply.
		r.Status = StatusInvalid
	}
	r.Freed, r.FreedSemaphores, r.Expired, r.Changed = m.freed, m.freedSems, m.expired, m.changed
	m.changed, m.freed, m.freedSems = nil, nil, nil
	m.tombQ.endEntry()
	return r
}

// advance moves the FSM clock by the time the same leader measured between
// its previous stamp and this one. Across a change of term nothing is added:
// two leaders' monotonic clocks cannot be compared, and adding nothing can
// only lengthen leases, never shorten them.
//
// A version 2 command says in which term its stamp was read. A stamp read in
// another term than the entry's (a leader that stamped, lost leadership, won
// a later term and only then logged the entry) may be older than time an
// earlier term already counted: it neither becomes the base nor adds time,
// and the clock's term stays the one its base belongs to, so the next stamp
// of this term sets the base. Version 1 commands cannot tell and keep the
// old rule (DESIGN.md, "Stale stamps").
func (m *Machine) advance(index, term uint64, c Command) {
	m.clock.Index = index
	if c.Version >= commandVersion2 && c.StampTerm != term {
		return
	}
	stamp := c.Stamp
	if term != m.clock.Term {
		m.clock.Term, m.clock.Stamp = term, stamp
		return
	}
	// Entries of one leader can reach the log slightly out of stamp order;
	// keeping the highest stamp means the clock never runs ahead of the leader.
	if stamp > m.clock.Stamp {
		m.clock.Now += stamp - m.clock.Stamp
		m.clock.Stamp = stamp
	}
}

// MaxExpiriesPerEntry bounds how many timers (lease expiries and ends of
// lock-delay) one entry settles, so that 100,000 leases due at one moment do
// not hold the machine in one long Apply: the leader ticks again at once
// while more are due, and a command on a lock always settles that lock
// first. A session's expiry counts the leases it ends (at least 1), and is
// never split: it is settled whole, or left to the next entry unless it is
// the entry's first. Replicas must agree on it: changing it is a log format
// change.
const MaxExpiriesPerEntry = 4096

// MaxExpiriesPerCommand bounds, from command format 5, the due timers a
// command other than a tick settles besides what it acts on: only ticks
// settle in bulk, so during a mass expiry a client's entry costs little
// and the leader's back-to-back ticks do the work. A due session that does
// not fit it whole is left to the ticks, even as the entry's first timer.
// Replicas must agree on it: changing it is a log format change.
const MaxExpiriesPerCommand = 64

// expiryBudget is how many leases' timers entry c settles besides what its
// command acts on, and whether it settles its first due timer whatever
// that costs (a session over the budget). Format 4 and older entries, and
// ticks, settle as they always did.
func (m *Machine) expiryBudget(c Command) (budget int, first bool) {
	if c.Version < commandVersion5 || c.Op == OpTick {
		return m.maxExpiries, true
	}
	return min(m.maxExpiries, m.maxCommandExpiries), false
}

// expireDue settles the timers whose time has come, earliest first (in the
// total order of timerHeap), within budget, stopping at the first that does
// not fit (a session's leases end together, in a later entry) unless first
// lets the entry's first timer through. It runs on every entry, so all
// replicas expire a lease at the same log position.
func (m *Machine) expireDue(budget int, first bool) {
	for n := 0; n < budget && len(m.timers) > 0 && m.timers[0].until <= m.clock.Now; {
		t := m.timers[0]
		cost := 1
		if t.kind == timerSession {
			cost = max(1, len(t.sess.leases))
		}
		if n+cost > budget && (n > 0 || !first) {
			return
		}
		n += cost
		m.settle(t)
	}
}

// settle acts on a due timer: a lease ends (an exclusive lock with
// lock-delay enters its delay), a lock-delay ends, a session ends with all
// its leases.
func (m *Machine) settle(t *timer) {
	switch {
	case t.kind == timerSession:
		m.expired += m.endSession(t.sess, true)
	case t.entry != nil: // the end of a lock-delay
		e := t.entry
		m.stopTimer(t)
		delete(m.locks, e.name)
		m.bury(e.name)
		m.freed = append(m.freed, e.name)
	case t.lease.lock.Limit > 0:
		m.endPermit(m.sems[t.lease.lock.Name], t.lease)
		m.expired++
	default:
		m.endLockLease(m.locks[t.lease.lock.Name], t.lease, true)
		m.expired++
	}
}

// settleLock settles lock name's due timers (its lease's or lock-delay's,
// or its holders' sessions'), whatever the cap left, so the command about
// to act on name sees it as of now.
func (m *Machine) settleLock(name string) {
	e, ok := m.locks[name]
	if !ok {
		return
	}
	if e.delayed {
		if e.delay.until <= m.clock.Now {
			m.settle(&e.delay)
		}
		return
	}
	for _, l := range append([]*lease(nil), e.holders...) {
		m.settleLease(l)
	}
}

// settleSem is settleLock for a semaphore's permits.
func (m *Machine) settleSem(name string) {
	if s, ok := m.sems[name]; ok {
		for _, l := range append([]*lease(nil), s.holders...) {
			m.settleLease(l)
		}
	}
}

// settleLease settles l's timer, or its session's, if due.
func (m *Machine) settleLease(l *lease) {
	switch {
	case l.ended:
	case l.lock.SessionID != "":
		m.settleSession(l.lock.SessionID)
	case l.t.until <= m.clock.Now:
		m.settle(&l.t)
	}
}

func (m *Machine) settleSession(id string) {
	if s, ok := m.sessions[id]; ok && s.t.until <= m.clock.Now {
		m.settle(&s.t)
	}
}

// endLockLease ends l, a lease holding lock e. With delay (an expiry or a
// force release, not a release or a session's close) an exclusive lease
// with lock-delay puts the lock into its delay.
func (m *Machine) endLockLease(e *entry, l *lease, delay bool) {
	v := m.viewLock(e, l)
	m.unlink(l)
	e.holders = withoutLease(e.holders, l)
	if delay && v.Mode == ModeExclusive && v.LockDelay > 0 && len(e.holders) == 0 {
		// Chubby/Consul lock-delay: a holder that vanished may still be
		// writing, so keep the lock from new holders for a while.
		e.delayed = true
		e.delay = timer{until: m.clock.Now + v.LockDelay*1e6, name: e.name, kind: timerLock, entry: e}
		heap.Push(&m.timers, &e.delay)
		m.touch(e) // readers see it free from now
		v.Index = e.index
		e.gone = v
		return
	}
	if len(e.holders) == 0 {
		delete(m.locks, e.name)
		m.bury(e.name)
	} else {
		m.touch(e)
	}
	m.freed = append(m.freed, e.name)
}

// endPermit ends l, a permit of semaphore s.
func (m *Machine) endPermit(s *semaphore, l *lease) {
	m.unlink(l)
	s.holders = withoutLease(s.holders, l)
	s.index = m.clock.Index
	if len(s.holders) == 0 {
		delete(m.sems, s.name)
	}
	m.freedSems = append(m.freedSems, s.name)
}

// endSession ends session s and every lease it holds, at this entry, in a
// fixed order (locks then permits, by name, then token). With delay (an
// expiry) its exclusive locks enter the session's lock-delay. It returns
// how many leases ended.
func (m *Machine) endSession(s *session, delay bool) int {
	leases := s.sorted()
	for _, l := range leases {
		if l.lock.Limit > 0 {
			m.endPermit(m.sems[l.lock.Name], l)
		} else {
			m.endLockLease(m.locks[l.lock.Name], l, delay)
		}
	}
	m.stopTimer(&s.t)
	delete(m.sessions, s.s.ID)
	return len(leases)
}

// unlink takes l out of the timers and its session: it holds nothing now.
func (m *Machine) unlink(l *lease) {
	m.stopTimer(&l.t)
	if l.lock.SessionID != "" {
		if s, ok := m.sessions[l.lock.SessionID]; ok {
			delete(s.leases, l)
		}
	}
	l.ended = true
	m.held--
}

func (m *Machine) stopTimer(t *timer) {
	if t.slot >= 0 {
		heap.Remove(&m.timers, t.slot)
		t.slot = -1
	}
}

func (m *Machine) setUntil(l *lease, until int64) {
	l.t.until, l.lock.Deadline = until, until
	heap.Fix(&m.timers, l.t.slot)
}

// ceilMillis converts nanoseconds to milliseconds, rounding up so a client
// that waits that long is never early.
func ceilMillis(ns int64) int64 {
	return (ns + 1e6 - 1) / 1e6
}

// touch records that the entry being applied changed lock e.
func (m *Machine) touch(e *entry) {
	e.index = m.clock.Index
	m.changed = append(m.changed, e.name)
}

// bury records that name became free at the entry being applied, pruning
// the oldest tombstones (lowest index, then name) beyond maxTombs.
func (m *Machine) bury(name string) {
	m.unbury(name)
	if m.tombTrace != nil {
		m.tombTrace(true, name, m.clock.Index)
	}
	t := &tomb{name: name, index: m.clock.Index, pending: true}
	m.tombs[name] = t
	m.tombQ.pending = append(m.tombQ.pending, t)
	m.changed = append(m.changed, name)
	for len(m.tombs) > m.maxTombs {
		old := m.tombQ.popOldest(m.clock.Index)
		delete(m.tombs, old.name)
		m.floor = max(m.floor, old.index)
	}
}

// unbury forgets name's tombstone: the lock is held again.
func (m *Machine) unbury(name string) {
	if t, ok := m.tombs[name]; ok {
		if m.tombTrace != nil {
			m.tombTrace(false, name, m.clock.Index)
		}
		m.tombQ.kill(t)
		delete(m.tombs, name)
	}
}

// indexOf is name's index under the read lock: the entry's, else its
// tombstone's, else the floor (0 until a tombstone was pruned).
func (m *Machine) indexOf(name string) uint64 {
	if e, ok := m.locks[name]; ok {
		return e.index
	}
	if t, ok := m.tombs[name]; ok {
		return t.index
	}
	return m.floor
}

// Index returns the Raft index of the entry that last changed lock name as
// readers see it: held, in lock-delay, or free. For a free lock it is the
// entry that freed it, 0 if it was never held, or the floor (the highest
// index of a forgotten tombstone) when that is higher: an index that can
// only rise, which is what a blocking read needs.
func (m *Machine) Index(name string) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.indexOf(name)
}

// PrefixIndex returns the highest index (as Index) of any lock whose name
// starts with prefix, and at least the floor. It scans every lock and
// tombstone.
func (m *Machine) PrefixIndex(prefix string) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	hi := m.floor
	for name, e := range m.locks {
		if e.index > hi && strings.HasPrefix(name, prefix) {
			hi = e.index
		}
	}
	for name, t := range m.tombs {
		if t.index > hi && strings.HasPrefix(name, prefix) {
			hi = t.index
		}
	}
	return hi
}

// Get returns the lease holding name, if any: of a shared lock, the holder
// with the lowest token.
func (m *Machine) Get(name string) (Lock, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.locks[name]
	if !ok || e.delayed {
		return Lock{}, false
	}
	return m.viewLock(e, e.holders[0]), true
}

// Lookup returns lock name if it is held, and the index of its last change,
// read together: a reader that paired a state with an index read apart from
// it could report a release at the grant's index (or the reverse), and a
// watcher waiting past that index would never hear of the change.
func (m *Machine) Lookup(name string) (l Lock, held bool, index uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e, ok := m.locks[name]; ok && !e.delayed {
		return m.viewLock(e, e.holders[0]), true, e.index
	}
	return Lock{}, false, m.indexOf(name)
}

// LookupHolders is Holders and Index read together, for the same reason
// as Lookup: every lease holding lock name, by token (none while it is
// free or in its lock-delay), and the index of the lock's last change.
func (m *Machine) LookupHolders(name string) ([]Lock, uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e, ok := m.locks[name]; ok && !e.delayed {
		return m.viewHolders(e), e.index
	}
	return nil, m.indexOf(name)
}

// ListIndexed is List and PrefixIndex read together, for the same reason
// as Lookup.
func (m *Machine) ListIndexed(prefix string, limit int) ([]Lock, bool, uint64) {
	m.mu.RLock()
	var out []Lock
	hi := m.floor
	for name, e := range m.locks {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		hi = max(hi, e.index)
		if !e.delayed {
			out = append(out, m.viewLock(e, e.holders[0]))
		}
	}
	for name, t := range m.tombs {
		if t.index > hi && strings.HasPrefix(name, prefix) {
			hi = t.index
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if limit > 0 && len(out) > limit {
		return out[:limit], true, hi
	}
	return out, false, hi
}

// List returns held locks whose names start with prefix, sorted by name, at
// most limit of them (limit <= 0: all), and whether more matched. A shared
// lock appears once, as its lowest-token holder.
func (m *Machine) List(prefix string, limit int) ([]Lock, bool) {
	m.mu.RLock()
	var out []Lock
	for name, e := range m.locks {
		if !e.delayed && strings.HasPrefix(name, prefix) {
			out = append(out, m.viewLock(e, e.holders[0]))
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if limit > 0 && len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// Holders returns every lease holding lock name, by token: one for an
// exclusive lock, any number for a shared one. Get returns the first.
func (m *Machine) Holders(name string) []Lock {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e, ok := m.locks[name]; ok && !e.delayed {
		return m.viewHolders(e)
	}
	return nil
}

// Session returns session id while it lives, with its leases.
func (m *Machine) Session(id string) (Session, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.sessions[id]
	if !ok {
		return Session{}, false
	}
	return m.viewSession(s), true
}

// HasSession reports whether session id lives, without building its view.
func (m *Machine) HasSession(id string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.sessions[id]
	return ok
}

// Semaphore returns semaphore name, its holders by slot; false when nobody
// holds a permit.
func (m *Machine) Semaphore(name string) (Semaphore, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.sems[name]
	if !ok {
		return Semaphore{}, false
	}
	out := Semaphore{Name: s.name, Limit: s.limit, Index: s.index, Holders: make([]Lock, len(s.holders))}
	for i, l := range s.holders {
		out.Holders[i] = m.viewPermit(s, l)
	}
	return out, true
}

// ProvenCommandVersion is the highest command format this state proves
// committed: 5 once a format 5 entry was applied here, or a snapshot
// restored whose state had applied one; else 1 (formats 2 to 4 leave no
// mark in a snapshot). A build that reads only older formats stops at the
// first format 5 entry and cannot restore a version 3 snapshot, so no such
// build holds this state or can apply any entry after it: a leader may
// write format 5 whatever its survey of the members says
// (raftnode/DESIGN.md, "The gate").
func (m *Machine) ProvenCommandVersion() uint8 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.format5 {
		return commandVersion5
	}
	return commandVersion1
}

// Clock returns the FSM clock as of the last applied entry.
func (m *Machine) Clock() Clock {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.clock
}

// NextTimer returns the FSM clock time of the next expiry (of a lease or a
// session) or end of lock-delay, and false when there is none.
func (m *Machine) NextTimer() (int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.timers) == 0 {
		return 0, false
	}
	return m.timers[0].until, true
}

// HeldCount returns how many leases are held: lock holders and permits.
func (m *Machine) HeldCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.held
}

// Counts is what a state holds, by kind.
type Counts struct {
	Locks      int // locks held (a lock held shared by three readers is one)
	LockHolds  int // leases holding a lock: every shared holder counts
	Semaphores int // semaphores with a permit held
	Permits    int // semaphore permits held
	Sessions   int // live sessions
}

// Counts counts the held locks, semaphore permits and sessions apart
// (HeldCount adds lock holds and permits together). Locks in their
// lock-delay, held by nobody, are not counted.
func (m *Machine) Counts() Counts {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := Counts{Semaphores: len(m.sems), Sessions: len(m.sessions)}
	for _, e := range m.locks {
		if len(e.holders) > 0 {
			n.Locks++
			n.LockHolds += len(e.holders)
		}
	}
	for _, s := range m.sems {
		n.Permits += len(s.holders)
	}
	return n
}

// Nodes returns a copy of the node id -> HTTP address table (without the
// cluster id the table also keeps, ClusterIDKey).
func (m *Machine) Nodes() map[string]string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]string, len(m.nodes))
	for id, addr := range m.nodes {
		if id != ClusterIDKey {
			out[id] = addr
		}
	}
	return out
}

// NodeAddr returns one node's HTTP address.
func (m *Machine) NodeAddr(id string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	addr, ok := m.nodes[id]
	return addr, ok
}

// timerKind is part of a timer's key. Before format 5 only timerLock
// existed, keyed by lock name alone; the order of those among themselves is
// unchanged (a log of older entries settles exactly as before).
type timerKind uint8

const (
	timerLock    timerKind = iota // an exclusive lease with a TTL, or a lock-delay
	timerShared                   // a shared holder's TTL (sub: its lease id)
	timerPermit                   // a permit's TTL (name: the semaphore; sub: lease id)
	timerSession                  // a session (name: its id)
)

// timer is one deadline on the FSM clock, with a key unique among timers:
// (name, kind, sub). It points at what it ends.
type timer struct {
	until int64
	name  string
	kind  timerKind
	sub   string
	slot  int // position in the heap, -1 when not in it

	lease *lease   // a lease's TTL
	entry *entry   // a lock-delay's end
	sess  *session // a session's
}

// timerHeap orders timers by until, then by key (name, kind, sub);
// container/heap keeps each timer's slot current so renewals and releases
// can fix or remove it in O(log n). The order must be total: when more
// timers are due at one instant than an entry may settle, which ones it
// settles must not depend on the heap's layout, which differs between a
// replica that replayed the log and one that restored a snapshot
// (heap.Init).
type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.until != b.until {
		return a.until < b.until
	}
	if a.name != b.name {
		return a.name < b.name
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.sub < b.sub
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.slot = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
