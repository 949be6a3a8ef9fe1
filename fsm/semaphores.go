package fsm

import "sort"

// semaphore is a semaphore while anyone holds a permit of it.
type semaphore struct {
	name    string
	limit   int64
	holders []*lease // by slot
	index   uint64   // the entry that last changed it
}

// holder returns the permit of s with id, or nil.
func (s *semaphore) holder(id string) *lease { return leaseOf(s.holders, id) }

// viewPermit is l as readers see it (viewLease), with the semaphore's index.
func (m *Machine) viewPermit(s *semaphore, l *lease) Lock { return m.viewLease(l, s.index) }

// semAcquire takes the lowest free slot of semaphore c.Name. The first
// holder sets the limit; while anyone holds a permit another limit is
// StatusLimitMismatch. The same lease asking again keeps its slot and token
// (and, with a TTL of its own, its deadline moves from now).
//
// It shares its checks (checkTerms) and grant with acquire but not its
// body: a permit takes a slot under a limit that must match, has no mode,
// lock-delay or value, and a full semaphore answers with every holder.
func (m *Machine) semAcquire(index uint64, c Command) Result {
	if c.Name == "" || c.LeaseID == "" || c.Limit < 1 || c.Limit > MaxSemaphoreLimit || c.LockDelay != 0 || c.Mode != ModeExclusive {
		return Result{Status: StatusInvalid}
	}
	sess, st := m.checkTerms(c)
	if st != StatusOK {
		return Result{Status: st}
	}
	s, ok := m.sems[c.Name]
	if ok {
		if c.Limit != s.limit {
			return Result{Status: StatusLimitMismatch, Limit: s.limit}
		}
		if l := s.holder(c.LeaseID); l != nil {
			if l.lock.SessionID != c.SessionID {
				return Result{Status: StatusInvalid}
			}
			if sess == nil {
				if l.lock.TTL != c.TTL {
					l.lock.TTL, s.index = c.TTL, index
				}
				m.setUntil(l, m.clock.Now+c.TTL*1e6)
			}
			return Result{Status: StatusOK, Lock: m.viewPermit(s, l)}
		}
		if int64(len(s.holders)) >= s.limit {
			r := Result{Status: StatusFull, Holders: make([]Lock, len(s.holders))}
			for i, l := range s.holders {
				r.Holders[i] = m.viewPermit(s, l)
			}
			sort.Slice(r.Holders, func(i, j int) bool { return r.Holders[i].Token < r.Holders[j].Token })
			return r
		}
	}
	if sess != nil && len(sess.leases) >= MaxLeasesPerSession {
		return Result{Status: StatusSessionFull}
	}
	if !ok {
		s = &semaphore{name: c.Name, limit: c.Limit}
		m.sems[c.Name] = s
	}
	slot := 0 // the lowest free: holders are by slot
	for slot < len(s.holders) && s.holders[slot].lock.Slot == slot {
		slot++
	}
	l := m.grant(index, c, sess, timerPermit, Lock{Name: c.Name, Slot: slot, Limit: s.limit})
	s.holders = append(s.holders, nil)
	copy(s.holders[slot+1:], s.holders[slot:])
	s.holders[slot] = l
	s.index = index
	return Result{Status: StatusOK, Lock: m.viewPermit(s, l)}
}

func (m *Machine) permit(c Command) (*semaphore, *lease) {
	s, ok := m.sems[c.Name]
	if !ok || c.LeaseID == "" {
		return nil, nil
	}
	if l := s.holder(c.LeaseID); l != nil {
		return s, l
	}
	return nil, nil
}

// semRenew pushes a permit's deadline (TTL 0 keeps it); a session's permit
// has none: StatusInvalid. It is renew (renewLease) but for where the
// change is recorded: a semaphore's own index (touch is a lock's).
func (m *Machine) semRenew(index uint64, c Command) Result {
	s, l := m.permit(c)
	changed, st := m.renewLease(c, l)
	if st != StatusOK {
		return Result{Status: st}
	}
	if changed {
		s.index = index
	}
	return Result{Status: StatusOK, Lock: m.viewPermit(s, l)}
}

// semRelease ends c's permit. It is release with endPermit for
// endLockLease: a permit has no lock-delay and leaves no tombstone.
func (m *Machine) semRelease(c Command) Result {
	s, l := m.permit(c)
	if l == nil {
		return Result{Status: StatusNotHolder}
	}
	v := m.viewPermit(s, l)
	m.endPermit(s, l)
	return Result{Status: StatusOK, Lock: v}
}
