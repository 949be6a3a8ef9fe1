package fsm

import (
	"cmp"
	"container/heap"
	"slices"
)

// session is a live session and the leases it holds.
type session struct {
	s      Session // Leases always nil: computed on read (viewSession)
	t      timer
	leases map[*lease]struct{}
}

// sorted is the session's leases in a fixed order: locks, then permits,
// each by name, then token. Everything that acts on all of them goes in
// this order, so every replica does the same.
// (The key is unique: one entry grants one lease, so any sort gives this
// order.)
func (s *session) sorted() []*lease {
	out := make([]*lease, 0, len(s.leases))
	for l := range s.leases {
		out = append(out, l)
	}
	slices.SortFunc(out, func(x, y *lease) int {
		a, b := &x.lock, &y.lock
		if (a.Limit > 0) != (b.Limit > 0) {
			if a.Limit > 0 {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return out
}

// viewSession is s with its leases, for reads. Session writes answer with
// s.s alone: every replica applies them, and the view of 4,096 leases is
// milliseconds of work nobody reads there.
func (m *Machine) viewSession(s *session) Session {
	v := s.s
	v.Leases = make([]Lock, 0, len(s.leases))
	for _, l := range s.sorted() {
		if l.lock.Limit > 0 {
			v.Leases = append(v.Leases, m.viewPermit(m.sems[l.lock.Name], l))
		} else {
			v.Leases = append(v.Leases, m.viewLock(m.locks[l.lock.Name], l))
		}
	}
	return v
}

// sessionCreate makes session c.SessionID, or refreshes it when it is
// created again with the same terms (a client retrying after a timeout):
// its deadline moves from now. A create of a live id with another owner,
// TTL or lock-delay is StatusInvalid and changes nothing: the first
// caller times the leases it holds with its own TTL and counts on its
// lock-delay, so a "retry" must not rewrite them under it.
func (m *Machine) sessionCreate(index uint64, c Command) Result {
	if c.SessionID == "" || c.TTL <= 0 || c.LockDelay < 0 {
		return Result{Status: StatusInvalid}
	}
	if s, ok := m.sessions[c.SessionID]; ok {
		if s.s.Owner != c.Owner || s.s.TTL != c.TTL || s.s.LockDelay != c.LockDelay {
			return Result{Status: StatusInvalid}
		}
		m.setSessionDeadline(s)
		return Result{Status: StatusOK, Session: s.s}
	}
	s := &session{s: Session{ID: c.SessionID, Owner: c.Owner, TTL: c.TTL, LockDelay: c.LockDelay, Index: index}, leases: map[*lease]struct{}{}}
	s.s.Deadline = m.clock.Now + c.TTL*1e6
	s.t = timer{until: s.s.Deadline, name: s.s.ID, kind: timerSession, sess: s}
	heap.Push(&m.timers, &s.t)
	m.sessions[s.s.ID] = s
	return Result{Status: StatusOK, Session: s.s}
}

func (m *Machine) setSessionDeadline(s *session) {
	s.s.Deadline = m.clock.Now + s.s.TTL*1e6
	s.t.until = s.s.Deadline
	heap.Fix(&m.timers, s.t.slot)
}

// sessionRenew pushes a session's deadline (TTL 0 keeps its TTL); its
// leases live as long.
func (m *Machine) sessionRenew(index uint64, c Command) Result {
	if c.SessionID == "" || c.TTL < 0 {
		return Result{Status: StatusInvalid}
	}
	s, ok := m.sessions[c.SessionID]
	if !ok {
		return Result{Status: StatusNoSession}
	}
	if c.TTL > 0 && c.TTL != s.s.TTL {
		s.s.TTL, s.s.Index = c.TTL, index
		m.touchSessionLeases(s, index)
	}
	m.setSessionDeadline(s)
	return Result{Status: StatusOK, Session: s.s}
}

// touchSessionLeases moves the index of every lock and semaphore where s
// holds a lease: their ttl_ms is the session's, and a change of ttl_ms
// moves the index (API.md), which wakes blocking reads. Only a TTL change
// gets here, so the cost (the session's leases, at most
// MaxLeasesPerSession) is paid rarely.
func (m *Machine) touchSessionLeases(s *session, index uint64) {
	for _, l := range s.sorted() {
		if l.lock.Limit > 0 {
			m.sems[l.lock.Name].index = index
		} else if e := m.locks[l.lock.Name]; e.index != index {
			m.touch(e)
		}
	}
}

// sessionClose ends a session and all its leases at this entry, without
// lock-delay (the holder says it is done). Result.Session is the session
// as it stood (without its leases), Ended how many leases it ended.
func (m *Machine) sessionClose(c Command) Result {
	if c.SessionID == "" {
		return Result{Status: StatusInvalid}
	}
	s, ok := m.sessions[c.SessionID]
	if !ok {
		return Result{Status: StatusNoSession}
	}
	return Result{Status: StatusOK, Session: s.s, Ended: m.endSession(s, false)}
}
