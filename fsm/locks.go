package fsm

import "container/heap"

// entry is a lock that is held (by one exclusive lease or by shared
// leases) or in its lock-delay after an expiry.
type entry struct {
	name    string
	holders []*lease // by token; shared when holders[0] is
	delayed bool     // a lease expired; nobody may acquire until delay.until
	gone    Lock     // during the delay: the lease whose expiry started it
	delay   timer    // the end of the lock-delay
	index   uint64   // the entry that last changed the lock (Lock.Index)
}

// lease is one grant: an exclusive or shared hold of a lock, or a semaphore
// permit (lock.Limit > 0). A session's leases keep TTL, LockDelay and
// Deadline 0 and have no timer: the session's apply (viewLock).
type lease struct {
	lock  Lock
	t     timer // its own deadline; slot -1 when it has none
	ended bool
}

func (e *entry) shared() bool { return len(e.holders) > 0 && e.holders[0].lock.Mode == ModeShared }

// holder returns the lease of e with id, or nil.
func (e *entry) holder(id string) *lease { return leaseOf(e.holders, id) }

// leaseOf returns the lease in holders with id, or nil. A lock's and a
// semaphore's holders are both lists of leases, searched the same way.
func leaseOf(holders []*lease, id string) *lease {
	for _, l := range holders {
		if l.lock.LeaseID == id {
			return l
		}
	}
	return nil
}

// withoutLease removes l from holders, keeping the order of the rest.
func withoutLease(holders []*lease, l *lease) []*lease {
	for i, h := range holders {
		if h == l {
			return append(holders[:i], holders[i+1:]...)
		}
	}
	return holders
}

// viewLock is l as readers see it: a session's lease with the session's
// TTL, deadline and (exclusive) lock-delay, and the lock's index.
func (m *Machine) viewLock(e *entry, l *lease) Lock { return m.viewLease(l, e.index) }

// viewLease is l as readers see it, with index as its Lock.Index: the index
// of the lock or semaphore it holds (viewLock, viewPermit).
func (m *Machine) viewLease(l *lease, index uint64) Lock {
	v := l.lock
	v.Index = index
	m.sessionTerms(&v)
	return v
}

func (m *Machine) sessionTerms(v *Lock) {
	if v.SessionID == "" {
		return
	}
	if s, ok := m.sessions[v.SessionID]; ok {
		v.TTL, v.Deadline = s.s.TTL, s.s.Deadline
		if v.Mode == ModeExclusive && v.Limit == 0 {
			v.LockDelay = s.s.LockDelay
		}
	}
}

func (m *Machine) viewHolders(e *entry) []Lock {
	out := make([]Lock, len(e.holders))
	for i, l := range e.holders {
		out[i] = m.viewLock(e, l)
	}
	return out
}

// heldBy is the answer to an acquire that lock e refuses.
func (m *Machine) heldBy(e *entry) Result {
	r := Result{Status: StatusHeld, Holder: m.viewLock(e, e.holders[0])}
	if e.shared() {
		r.Holders = m.viewHolders(e)
	}
	return r
}

// checkTerms validates how an acquire says how long it lasts: a TTL of its
// own, or a session (then no TTL and no lock-delay of its own). It returns
// the session, or a status to answer.
func (m *Machine) checkTerms(c Command) (*session, Status) {
	if c.SessionID == "" {
		if c.TTL <= 0 {
			return nil, StatusInvalid
		}
		return nil, StatusOK
	}
	if c.TTL != 0 || c.LockDelay != 0 {
		return nil, StatusInvalid
	}
	s, ok := m.sessions[c.SessionID]
	if !ok {
		return nil, StatusNoSession
	}
	return s, StatusOK
}

// grant makes a new lease for c at index: with its own timer, or in
// session s.
func (m *Machine) grant(index uint64, c Command, s *session, kind timerKind, l Lock) *lease {
	l.Owner, l.LeaseID, l.Token, l.SessionID = c.Owner, c.LeaseID, index, c.SessionID
	g := &lease{lock: l, t: timer{slot: -1}}
	if s == nil {
		g.lock.TTL = c.TTL
		g.lock.Deadline = m.clock.Now + c.TTL*1e6
		g.t = timer{until: g.lock.Deadline, name: l.Name, kind: kind, lease: g}
		if kind != timerLock {
			g.t.sub = c.LeaseID
		}
		heap.Push(&m.timers, &g.t)
	} else {
		s.leases[g] = struct{}{}
	}
	m.held++
	return g
}

func (m *Machine) acquire(index uint64, c Command) Result {
	if c.Name == "" || c.LeaseID == "" || c.LockDelay < 0 || c.Limit != 0 || (c.Mode == ModeShared && (c.LockDelay > 0 || c.Value != "")) {
		return Result{Status: StatusInvalid}
	}
	sess, st := m.checkTerms(c)
	if st != StatusOK {
		return Result{Status: st}
	}
	e, ok := m.locks[c.Name]
	if ok {
		if e.delayed {
			return Result{Status: StatusHeld, Holder: e.gone, Retry: ceilMillis(e.delay.until - m.clock.Now)}
		}
		if l := e.holder(c.LeaseID); l != nil {
			if l.lock.Mode != c.Mode {
				return m.heldBy(e) // no upgrade (nor downgrade): release, then acquire
			}
			if l.lock.SessionID != c.SessionID {
				return Result{Status: StatusInvalid}
			}
			// The same lease asks again: a client retrying after a timeout.
			// It keeps its token and, like a renew, its deadline moves from
			// now. A version 4 retry also sets the value (the holder's
			// latest word); older commands have none to set and keep it.
			changed := c.Version >= commandVersion4 && l.lock.Value != c.Value
			if c.Version >= commandVersion4 {
				l.lock.Value = c.Value
			}
			if sess == nil {
				changed = changed || l.lock.TTL != c.TTL
				l.lock.TTL, l.lock.LockDelay = c.TTL, c.LockDelay
				m.setUntil(l, m.clock.Now+c.TTL*1e6)
			}
			if changed {
				m.touch(e)
			}
			return Result{Status: StatusOK, Lock: m.viewLock(e, l)}
		}
		if c.Mode != ModeShared || !e.shared() {
			return m.heldBy(e)
		}
	}
	if sess != nil && len(sess.leases) >= MaxLeasesPerSession {
		return Result{Status: StatusSessionFull}
	}
	kind := timerLock
	if c.Mode == ModeShared {
		kind = timerShared
	}
	l := m.grant(index, c, sess, kind, Lock{Name: c.Name, Value: c.Value, Mode: c.Mode})
	if sess == nil {
		l.lock.LockDelay = c.LockDelay
	}
	if !ok {
		e = &entry{name: c.Name, delay: timer{slot: -1}}
		m.locks[c.Name] = e
		m.unbury(c.Name)
	}
	e.holders = append(e.holders, l) // the largest token: order kept
	m.touch(e)
	return Result{Status: StatusOK, Lock: m.viewLock(e, l)}
}

// holding returns the lock c names and the lease of it c's lease holds.
func (m *Machine) holding(c Command) (*entry, *lease) {
	e, ok := m.locks[c.Name]
	if !ok || e.delayed || c.LeaseID == "" {
		return nil, nil
	}
	if l := e.holder(c.LeaseID); l != nil {
		return e, l
	}
	return nil, nil
}

// renew pushes a lease's deadline. A session's lease has none: renew the
// session (StatusInvalid).
func (m *Machine) renew(c Command) Result {
	e, l := m.holding(c)
	changed, st := m.renewLease(c, l)
	if st != StatusOK {
		return Result{Status: st}
	}
	if changed {
		m.touch(e)
	}
	return Result{Status: StatusOK, Lock: m.viewLock(e, l)}
}

// renewLease is a renew of lease l (nil: c's lease holds nothing), for a
// lock (renew) or a permit (semRenew), which differ only in where the
// change is recorded: it checks c, sets the TTL c gives (0 keeps it) and
// moves l's deadline to now plus its TTL. changed says the TTL changed, so
// the caller raises the index of what l holds.
func (m *Machine) renewLease(c Command, l *lease) (changed bool, st Status) {
	switch {
	case c.TTL < 0:
		return false, StatusInvalid
	case l == nil:
		return false, StatusNotHolder
	case l.lock.SessionID != "":
		return false, StatusInvalid
	}
	if c.TTL > 0 && c.TTL != l.lock.TTL {
		l.lock.TTL, changed = c.TTL, true
	}
	m.setUntil(l, m.clock.Now+l.lock.TTL*1e6)
	return changed, StatusOK
}

// update replaces the value of the lease's hold on the lock; the token, TTL
// and deadline stay. An unchanged value changes nothing (and not the index).
// A shared hold publishes no value (StatusInvalid): readers share the lock,
// and it could show only one of their values.
func (m *Machine) update(c Command) Result {
	if c.Name == "" {
		return Result{Status: StatusInvalid}
	}
	e, l := m.holding(c)
	if l == nil {
		return Result{Status: StatusNotHolder}
	}
	if l.lock.Mode == ModeShared {
		return Result{Status: StatusInvalid}
	}
	if l.lock.Value != c.Value {
		l.lock.Value = c.Value
		m.touch(e)
	}
	return Result{Status: StatusOK, Lock: m.viewLock(e, l)}
}

func (m *Machine) release(c Command) Result {
	e, l := m.holding(c)
	if l == nil {
		return Result{Status: StatusNotHolder}
	}
	v := m.viewLock(e, l)
	m.endLockLease(e, l, false)
	return Result{Status: StatusOK, Lock: v}
}

// forceRelease ends every lease holding c.Name, whoever holds it, exactly
// as their expiry would at this entry: an exclusive lease with lock-delay
// puts the lock into its delay (the holder may still be writing), otherwise
// the lock is freed. Result.Lock is the (first) lease it ended. A lock that
// is free or already in its lock-delay is left as it is: StatusOK with an
// empty Lock, so a retried force release (after an unknown outcome)
// succeeds and says it ended nothing.
func (m *Machine) forceRelease(c Command) Result {
	if c.Name == "" {
		return Result{Status: StatusInvalid}
	}
	e, ok := m.locks[c.Name]
	if !ok || e.delayed {
		return Result{Status: StatusOK}
	}
	r := Result{Status: StatusOK, Lock: m.viewLock(e, e.holders[0])}
	for _, l := range append([]*lease(nil), e.holders...) {
		m.endLockLease(e, l, true)
	}
	return r
}
