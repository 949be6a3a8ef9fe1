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
	// Session: the session as it now stands, for session ops with StatusOK.
	Session Session
	// Ended: for a session close, how many leases it ended.
	Ended int
	// FreedSemaphores lists semaphores that got a free permit during this
	// entry, so the leader can serve their waiters.
	FreedSemaphores []string
}

// entry is a lock that is either held or in its lock-delay after an expiry.
type entry struct {
	lock    Lock
	delayed bool  // true: lease expired, nobody may acquire until until
	until   int64 // deadline (held) or end of lock-delay (delayed), FSM clock ns
	slot    int   // position in the timers heap
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
	mu     sync.RWMutex
	clock  Clock
	locks  map[string]*entry
	timers timerHeap // every entry, ordered by until
	held   int
	nodes  map[string]string // node id -> HTTP address
	// tombs remembers, for locks that became free, the index at which they
	// did, so a blocking read on a freed lock sees its index rise; at most
	// maxTombs of them, the oldest pruned first, floor the highest index
	// pruned (DESIGN.md, "Lock indexes").
	tombs    map[string]*tomb
	tombHeap tombHeap
	floor    uint64
	maxTombs int
	changed  []string // names changed by the entry being applied
	// maxExpiries is MaxExpiriesPerEntry; tests lower it to reach the cap
	// with a handful of locks. Replicas must agree on it.
	maxExpiries int
}

// New returns an empty machine.
func New() *Machine {
	return &Machine{locks: make(map[string]*entry), nodes: make(map[string]string), tombs: make(map[string]*tomb),
		maxExpiries: MaxExpiriesPerEntry, maxTombs: MaxTombstones}
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
	m.advance(index, term, c)
	m.changed = nil
	freed, expired := m.expireDue()
	if c.Op == OpAcquire || c.Op == OpRenew || c.Op == OpRelease || c.Op == OpForceRelease || c.Op == OpUpdate {
		f, x := m.settleName(c.Name)
		freed, expired = append(freed, f...), expired+x
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
	r.Freed = append(freed, r.Freed...)
	r.Expired = expired
	r.Changed, m.changed = m.changed, nil
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
// first. Replicas must agree on it: changing it is a log format change.
const MaxExpiriesPerEntry = 4096

// expireDue ends the leases and lock-delays whose time has come, earliest
// first, at most MaxExpiriesPerEntry of them. It runs on every entry, so all
// replicas expire a lease at the same log position.
func (m *Machine) expireDue() (freed []string, expired int) {
	for n := 0; n < m.maxExpiries && len(m.timers) > 0 && m.timers[0].until <= m.clock.Now; n++ {
		name, ended := m.settle(m.timers[0])
		if name != "" {
			freed = append(freed, name)
		}
		if ended {
			expired++
		}
	}
	return freed, expired
}

// settleName settles name's timer if it is due, whatever the cap left, so
// the command about to act on name sees it as of now.
func (m *Machine) settleName(name string) (freed []string, expired int) {
	if e, ok := m.locks[name]; ok && e.until <= m.clock.Now {
		n, ended := m.settle(e)
		if n != "" {
			freed = append(freed, n)
		}
		if ended {
			expired++
		}
	}
	return freed, expired
}

// settle moves a due entry on: a lease with lock-delay into its delay, any
// other lease or an ended delay out of the table. It returns the lock's name
// if the lock became free, and whether a lease ended.
func (m *Machine) settle(e *entry) (freed string, leaseEnded bool) {
	if !e.delayed && e.lock.LockDelay > 0 {
		// Chubby/Consul lock-delay: a holder that vanished may still be
		// writing, so keep the lock from new holders for a while.
		e.delayed = true
		e.until = m.clock.Now + e.lock.LockDelay*1e6
		m.held--
		heap.Fix(&m.timers, e.slot)
		m.touch(e) // readers see it free from now
		return "", true
	}
	heap.Remove(&m.timers, e.slot)
	if !e.delayed {
		m.held--
		leaseEnded = true
	}
	delete(m.locks, e.lock.Name)
	m.bury(e.lock.Name)
	return e.lock.Name, leaseEnded
}

func (m *Machine) acquire(index uint64, c Command) Result {
	if c.Name == "" || c.LeaseID == "" || c.TTL <= 0 || c.LockDelay < 0 {
		return Result{Status: StatusInvalid}
	}
	if e, ok := m.locks[c.Name]; ok {
		if e.delayed {
			return Result{Status: StatusHeld, Holder: e.lock, Retry: ceilMillis(e.until - m.clock.Now)}
		}
		if e.lock.LeaseID != c.LeaseID {
			return Result{Status: StatusHeld, Holder: e.lock}
		}
		// The same lease asks again: a client retrying after a timeout. It
		// keeps its token and, like a renew, its deadline moves from now.
		// A version 4 retry also sets the value (the holder's latest
		// word); older commands have none to set and keep it.
		if e.lock.TTL != c.TTL || (c.Version >= commandVersion4 && e.lock.Value != c.Value) {
			m.touch(e)
		}
		if c.Version >= commandVersion4 {
			e.lock.Value = c.Value
		}
		e.lock.TTL, e.lock.LockDelay = c.TTL, c.LockDelay
		m.setUntil(e, m.clock.Now+c.TTL*1e6)
		return Result{Status: StatusOK, Lock: e.lock}
	}
	e := &entry{lock: Lock{
		Name: c.Name, Owner: c.Owner, LeaseID: c.LeaseID,
		Token: index, TTL: c.TTL, LockDelay: c.LockDelay, Value: c.Value,
	}}
	e.until = m.clock.Now + c.TTL*1e6
	e.lock.Deadline = e.until
	m.locks[c.Name] = e
	heap.Push(&m.timers, e)
	m.held++
	m.unbury(c.Name)
	m.touch(e)
	return Result{Status: StatusOK, Lock: e.lock}
}

func (m *Machine) renew(c Command) Result {
	if c.TTL < 0 {
		return Result{Status: StatusInvalid}
	}
	e := m.holding(c)
	if e == nil {
		return Result{Status: StatusNotHolder}
	}
	if c.TTL > 0 && c.TTL != e.lock.TTL {
		e.lock.TTL = c.TTL
		m.touch(e)
	}
	m.setUntil(e, m.clock.Now+e.lock.TTL*1e6)
	return Result{Status: StatusOK, Lock: e.lock}
}

// update replaces the value of the lock c's lease holds; the token, TTL and
// deadline stay. An unchanged value changes nothing (and not the index).
func (m *Machine) update(c Command) Result {
	if c.Name == "" {
		return Result{Status: StatusInvalid}
	}
	e := m.holding(c)
	if e == nil {
		return Result{Status: StatusNotHolder}
	}
	if e.lock.Value != c.Value {
		e.lock.Value = c.Value
		m.touch(e)
	}
	return Result{Status: StatusOK, Lock: e.lock}
}

func (m *Machine) release(c Command) Result {
	e := m.holding(c)
	if e == nil {
		return Result{Status: StatusNotHolder}
	}
	heap.Remove(&m.timers, e.slot)
	delete(m.locks, c.Name)
	m.held--
	m.bury(c.Name)
	return Result{Status: StatusOK, Lock: e.lock, Freed: []string{c.Name}}
}

// forceRelease ends the lease holding c.Name, whoever holds it, exactly as
// its expiry would at this entry: with lock-delay the lock enters its delay
// (the holder may still be writing), otherwise it is freed. Result.Lock is
// the lease it ended. A lock that is free or already in its lock-delay is
// left as it is: StatusOK with an empty Lock, so a retried force release
// (after an unknown outcome) succeeds and says it ended nothing.
func (m *Machine) forceRelease(c Command) Result {
	if c.Name == "" {
		return Result{Status: StatusInvalid}
	}
	e, ok := m.locks[c.Name]
	if !ok || e.delayed {
		return Result{Status: StatusOK}
	}
	ended := e.lock
	e.until = m.clock.Now // due now: settle applies the lease's lock-delay, if any
	heap.Fix(&m.timers, e.slot)
	freed, _ := m.settle(e)
	r := Result{Status: StatusOK, Lock: ended}
	if freed != "" {
		r.Freed = []string{freed}
	}
	return r
}

// holding returns the entry c's lease holds, or nil.
func (m *Machine) holding(c Command) *entry {
	e, ok := m.locks[c.Name]
	if !ok || e.delayed || c.LeaseID == "" || e.lock.LeaseID != c.LeaseID {
		return nil
	}
	return e
}

func (m *Machine) setUntil(e *entry, until int64) {
	e.until, e.lock.Deadline = until, until
	heap.Fix(&m.timers, e.slot)
}

// ceilMillis converts nanoseconds to milliseconds, rounding up so a client
// that waits that long is never early.
func ceilMillis(ns int64) int64 {
	return (ns + 1e6 - 1) / 1e6
}

// touch records that the entry being applied changed e.
func (m *Machine) touch(e *entry) {
	e.lock.Index = m.clock.Index
	m.changed = append(m.changed, e.lock.Name)
}

// bury records that name became free at the entry being applied, pruning
// the oldest tombstones (lowest index, then name) beyond maxTombs.
func (m *Machine) bury(name string) {
	m.unbury(name)
	t := &tomb{name: name, index: m.clock.Index}
	m.tombs[name] = t
	heap.Push(&m.tombHeap, t)
	m.changed = append(m.changed, name)
	for len(m.tombHeap) > m.maxTombs {
		old := heap.Pop(&m.tombHeap).(*tomb)
		delete(m.tombs, old.name)
		m.floor = max(m.floor, old.index)
	}
}

// unbury forgets name's tombstone: the lock is held again.
func (m *Machine) unbury(name string) {
	if t, ok := m.tombs[name]; ok {
		heap.Remove(&m.tombHeap, t.slot)
		delete(m.tombs, name)
	}
}

// indexOf is name's index under the read lock: the entry's, else its
// tombstone's, else the floor (0 until a tombstone was pruned).
func (m *Machine) indexOf(name string) uint64 {
	if e, ok := m.locks[name]; ok {
		return e.lock.Index
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
		if e.lock.Index > hi && strings.HasPrefix(name, prefix) {
			hi = e.lock.Index
		}
	}
	for name, t := range m.tombs {
		if t.index > hi && strings.HasPrefix(name, prefix) {
			hi = t.index
		}
	}
	return hi
}

// Get returns the lease holding name, if any.
func (m *Machine) Get(name string) (Lock, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.locks[name]
	if !ok || e.delayed {
		return Lock{}, false
	}
	return e.lock, true
}

// Lookup returns lock name if it is held, and the index of its last change,
// read together: a reader that paired a state with an index read apart from
// it could report a release at the grant's index (or the reverse), and a
// watcher waiting past that index would never hear of the change.
func (m *Machine) Lookup(name string) (l Lock, held bool, index uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e, ok := m.locks[name]; ok && !e.delayed {
		return e.lock, true, e.lock.Index
	}
	return Lock{}, false, m.indexOf(name)
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
		hi = max(hi, e.lock.Index)
		if !e.delayed {
			out = append(out, e.lock)
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
// most limit of them (limit <= 0: all), and whether more matched.
func (m *Machine) List(prefix string, limit int) ([]Lock, bool) {
	m.mu.RLock()
	var out []Lock
	for name, e := range m.locks {
		if !e.delayed && strings.HasPrefix(name, prefix) {
			out = append(out, e.lock)
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
		return []Lock{e.lock}
	}
	return nil
}

// Session returns session id while it lives.
func (m *Machine) Session(id string) (Session, bool) {
	return Session{}, false
}

// Semaphore returns semaphore name; false when nobody holds a permit.
func (m *Machine) Semaphore(name string) (Semaphore, bool) {
	return Semaphore{}, false
}

// Clock returns the FSM clock as of the last applied entry.
func (m *Machine) Clock() Clock {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.clock
}

// NextTimer returns the FSM clock time of the next expiry or end of
// lock-delay, and false when there is none.
func (m *Machine) NextTimer() (int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.timers) == 0 {
		return 0, false
	}
	return m.timers[0].until, true
}

// HeldCount returns how many leases are held.
func (m *Machine) HeldCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.held
}

// Nodes returns a copy of the node id -> HTTP address table.
func (m *Machine) Nodes() map[string]string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]string, len(m.nodes))
	for id, addr := range m.nodes {
		out[id] = addr
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

// timerHeap orders entries by until, then by name; container/heap keeps
// each entry's slot current so renewals and releases can fix or remove it in
// O(log n). The order must be total: when more timers are due at one instant
// than an entry may settle, which ones it settles must not depend on the
// heap's layout, which differs between a replica that replayed the log and
// one that restored a snapshot (heap.Init). Names are unique keys of locks.
type timerHeap []*entry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].until != h[j].until {
		return h[i].until < h[j].until
	}
	return h[i].lock.Name < h[j].lock.Name
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}
func (h *timerHeap) Push(x any) {
	e := x.(*entry)
	e.slot = len(*h)
	*h = append(*h, e)
}
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// tomb is a freed lock's index. tombHeap orders tombstones by index, then
// name (total, so pruning does not depend on the heap's layout).
type tomb struct {
	name  string
	index uint64
	slot  int
}

type tombHeap []*tomb

func (h tombHeap) Len() int { return len(h) }
func (h tombHeap) Less(i, j int) bool {
	if h[i].index != h[j].index {
		return h[i].index < h[j].index
	}
	return h[i].name < h[j].name
}
func (h tombHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}
func (h *tombHeap) Push(x any) {
	t := x.(*tomb)
	t.slot = len(*h)
	*h = append(*h, t)
}
func (h *tombHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
