package fsm

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
)

// snapshotMagic opens every snapshot; the version follows it so that a
// newer format is refused clearly instead of misread.
//
// Version 2 adds each lock's value and index, then after the nodes the
// tombstone floor and the tombstones (name, index) sorted by name. Version 1
// is still read: indexes 0, no values, no tombstones.
//
// Version 3 carries sessions, semaphores and shared holders (below). It is
// written once the state has applied a format 5 entry (Machine.format5),
// even when none of those is left, and only then: before it, during a
// rolling upgrade, old and new replicas write equal states byte for byte
// alike (the state check hashes them), and after it no old build holds the
// state. Restoring version 3 sets format5 again, so a restored replica and
// one that replayed the log keep writing the same version.
const (
	snapshotMagic    = "RAFTLOCK-SNAP"
	snapshotVersion1 = 1
	snapshotVersion2 = 2
	snapshotVersion3 = 3
)

// ErrBadSnapshot is returned by Restore for data it cannot read.
var ErrBadSnapshot = errors.New("fsm: malformed snapshot")

// Snapshot is a point-in-time copy of the state, taken under the lock so it
// can be written out while Apply goes on.
type Snapshot struct {
	clock    Clock
	locks    []snapLock
	leases   []Lock // every lock's holders, as stored, in runs (snapLock.first, n)
	nodes    map[string]string
	sessions []Session // Leases unused
	sems     []snapSem
	tombs    []tomb
	floor    uint64
	v3       bool // format 5 applied, or anything version 2 cannot carry
}

// snapLock is one lock of a Snapshot: its holders are leases[first:first+n];
// during a lock-delay, leases[first-1] is the lease that expired.
type snapLock struct {
	name     string
	index    uint64
	delayed  bool
	until    int64 // end of the lock-delay
	first, n int
}

type snapSem struct {
	name    string
	limit   int64
	index   uint64
	holders []Lock // by slot, as stored
}

// Snapshot copies the state. Copying values (not pointers) keeps the copy
// independent of later applies.
func (m *Machine) Snapshot() *Snapshot {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := &Snapshot{clock: m.clock, locks: make([]snapLock, 0, len(m.locks)), leases: make([]Lock, 0, len(m.locks)),
		nodes: make(map[string]string, len(m.nodes)), v3: m.format5 || len(m.sessions) > 0 || len(m.sems) > 0}
	for _, e := range m.locks {
		if e.delayed {
			s.leases = append(s.leases, e.gone)
			if e.gone.SessionID != "" || e.gone.Mode != ModeExclusive {
				s.v3 = true
			}
		}
		sl := snapLock{name: e.name, index: e.index, delayed: e.delayed, until: e.delay.until, first: len(s.leases), n: len(e.holders)}
		for _, l := range e.holders {
			if l.lock.Mode != ModeExclusive || l.lock.SessionID != "" {
				s.v3 = true
			}
			s.leases = append(s.leases, l.lock)
		}
		s.locks = append(s.locks, sl)
	}
	for id, addr := range m.nodes {
		s.nodes[id] = addr
	}
	for _, ss := range m.sessions {
		s.sessions = append(s.sessions, ss.s)
	}
	for _, sm := range m.sems {
		c := snapSem{name: sm.name, limit: sm.limit, index: sm.index, holders: make([]Lock, len(sm.holders))}
		for i, l := range sm.holders {
			c.holders[i] = l.lock
		}
		s.sems = append(s.sems, c)
	}
	s.tombs = make([]tomb, 0, len(m.tombs))
	for _, t := range m.tombs {
		s.tombs = append(s.tombs, tomb{name: t.name, index: t.index})
	}
	s.floor = m.floor
	return s
}

// WriteTo writes the snapshot in the versioned binary format. Everything is
// sorted by name (or id) so equal states write equal bytes.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) { return s.write(w, true) }

// WriteOutcomeStateTo writes what decides the answer to every later entry:
// the clock, the locks with their holders, deadlines, lock-delays and
// values, the sessions, the semaphores and the node table, in the
// snapshot's canonical order, without the watch bookkeeping (the
// last-change indexes of locks, sessions and semaphores, the tombstones of
// freed locks and their floor). Replicas compare hashes of these bytes. The
// bookkeeping is left out because replicas may disagree on it without
// disagreeing on any lock: a node that restored a format-1 snapshot (written
// before indexes existed) has index 0 where one that replayed the same
// stretch of log has the real indexes, until those locks change again.
func (s *Snapshot) WriteOutcomeStateTo(w io.Writer) (int64, error) { return s.write(w, false) }

func (s *Snapshot) write(w io.Writer, watchMeta bool) (int64, error) {
	sort.Slice(s.locks, func(i, j int) bool { return s.locks[i].name < s.locks[j].name })
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	var buf []byte
	flush := func(force bool) error {
		if force || len(buf) > 32<<10 {
			if _, err := bw.Write(buf); err != nil {
				return fmt.Errorf("write snapshot: %w", err)
			}
			buf = buf[:0]
		}
		return nil
	}
	version := uint64(snapshotVersion2)
	if s.v3 {
		version = snapshotVersion3
	}
	buf = append(buf, snapshotMagic...)
	buf = binary.AppendUvarint(buf, version)
	buf = binary.AppendVarint(buf, s.clock.Now)
	buf = binary.AppendUvarint(buf, s.clock.Term)
	buf = binary.AppendVarint(buf, s.clock.Stamp)
	buf = binary.AppendUvarint(buf, s.clock.Index)
	buf = binary.AppendUvarint(buf, uint64(len(s.locks)))
	for i := range s.locks {
		e := &s.locks[i]
		if s.v3 {
			buf = appendString(buf, e.name)
			if watchMeta {
				buf = binary.AppendUvarint(buf, e.index)
			}
			if e.delayed {
				buf = append(buf, 1)
				buf = binary.AppendVarint(buf, e.until)
				buf = appendLease(buf, &s.leases[e.first-1])
			} else {
				buf = append(buf, 0)
			}
			buf = binary.AppendUvarint(buf, uint64(e.n))
			for j := e.first; j < e.first+e.n; j++ {
				buf = appendLease(buf, &s.leases[j])
			}
		} else {
			// Version 2: one lease per lock, the expired one during a delay.
			var l *Lock
			until := e.until
			if e.delayed {
				l = &s.leases[e.first-1]
			} else {
				l = &s.leases[e.first]
				until = l.Deadline
			}
			buf = appendString(buf, e.name)
			buf = appendString(buf, l.Owner)
			buf = appendString(buf, l.LeaseID)
			buf = binary.AppendUvarint(buf, l.Token)
			buf = binary.AppendVarint(buf, l.TTL)
			buf = binary.AppendVarint(buf, l.LockDelay)
			buf = binary.AppendVarint(buf, l.Deadline)
			buf = binary.AppendVarint(buf, until)
			if e.delayed {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
			}
			buf = appendString(buf, l.Value)
			if watchMeta {
				buf = binary.AppendUvarint(buf, e.index)
			}
		}
		if err := flush(false); err != nil {
			return cw.n, err
		}
	}
	ids := make([]string, 0, len(s.nodes))
	for id := range s.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	buf = binary.AppendUvarint(buf, uint64(len(ids)))
	for _, id := range ids {
		buf = appendString(buf, id)
		buf = appendString(buf, s.nodes[id])
	}
	if s.v3 {
		sort.Slice(s.sessions, func(i, j int) bool { return s.sessions[i].ID < s.sessions[j].ID })
		buf = binary.AppendUvarint(buf, uint64(len(s.sessions)))
		for i := range s.sessions {
			ss := &s.sessions[i]
			buf = appendString(buf, ss.ID)
			buf = appendString(buf, ss.Owner)
			buf = binary.AppendVarint(buf, ss.TTL)
			buf = binary.AppendVarint(buf, ss.LockDelay)
			buf = binary.AppendVarint(buf, ss.Deadline)
			if watchMeta {
				buf = binary.AppendUvarint(buf, ss.Index)
			}
			if err := flush(false); err != nil {
				return cw.n, err
			}
		}
		sort.Slice(s.sems, func(i, j int) bool { return s.sems[i].name < s.sems[j].name })
		buf = binary.AppendUvarint(buf, uint64(len(s.sems)))
		for i := range s.sems {
			sm := &s.sems[i]
			buf = appendString(buf, sm.name)
			buf = binary.AppendVarint(buf, sm.limit)
			if watchMeta {
				buf = binary.AppendUvarint(buf, sm.index)
			}
			buf = binary.AppendUvarint(buf, uint64(len(sm.holders)))
			for j := range sm.holders {
				buf = appendLease(buf, &sm.holders[j])
			}
			if err := flush(false); err != nil {
				return cw.n, err
			}
		}
	}
	sort.Slice(s.tombs, func(i, j int) bool { return s.tombs[i].name < s.tombs[j].name })
	tombs := s.tombs
	if watchMeta {
		buf = binary.AppendUvarint(buf, s.floor)
	} else {
		tombs = nil
	}
	buf = binary.AppendUvarint(buf, uint64(len(tombs)))
	for _, t := range tombs {
		buf = appendString(buf, t.name)
		buf = binary.AppendUvarint(buf, t.index)
		if err := flush(false); err != nil {
			return cw.n, err
		}
	}
	if err := flush(true); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("write snapshot: %w", err)
	}
	return cw.n, nil
}

// appendLease writes a stored lease (version 3); its name is its lock's or
// semaphore's, its index theirs.
func appendLease(b []byte, l *Lock) []byte {
	b = appendString(b, l.Owner)
	b = appendString(b, l.LeaseID)
	b = binary.AppendUvarint(b, l.Token)
	b = binary.AppendVarint(b, l.TTL)
	b = binary.AppendVarint(b, l.LockDelay)
	b = binary.AppendVarint(b, l.Deadline)
	b = appendString(b, l.Value)
	b = appendString(b, l.SessionID)
	b = append(b, byte(l.Mode))
	b = binary.AppendUvarint(b, uint64(l.Slot))
	return binary.AppendVarint(b, l.Limit)
}

func (s *snapReader) lease(name string) Lock {
	l := Lock{Name: name, Owner: s.string(), LeaseID: s.string(), Token: s.uvarint(), TTL: s.varint(), LockDelay: s.varint(),
		Deadline: s.varint(), Value: s.string(), SessionID: s.string(), Mode: Mode(s.byte())}
	l.Slot, l.Limit = int(s.uvarint()), s.varint()
	if s.err == nil && (l.Mode > ModeShared || l.Slot > MaxSemaphoreLimit) {
		s.err = fmt.Errorf("lease of %q: mode %d, slot %d", name, l.Mode, l.Slot)
	}
	return l
}

// Restore replaces the machine's state with a snapshot read from r.
func (m *Machine) Restore(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	rd := snapReader{r: br}
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return fmt.Errorf("%w: missing header", ErrBadSnapshot)
	}
	v := rd.uvarint()
	if rd.err == nil && (v < snapshotVersion1 || v > snapshotVersion3) {
		return fmt.Errorf("%w: unsupported version %d", ErrBadSnapshot, v)
	}
	n := New()
	n.clock = Clock{Now: rd.varint(), Term: rd.uvarint(), Stamp: rd.varint(), Index: rd.uvarint()}
	var bound []*lease // leases of sessions, linked once the sessions are read
	addLease := func(l Lock) *lease {
		g := &lease{lock: l, t: timer{slot: -1}}
		n.held++
		if l.SessionID != "" {
			bound = append(bound, g)
			return g
		}
		g.t = timer{until: l.Deadline, name: l.Name, lease: g, slot: len(n.timers)}
		switch {
		case l.Limit > 0:
			g.t.kind, g.t.sub = timerPermit, l.LeaseID
		case l.Mode == ModeShared:
			g.t.kind, g.t.sub = timerShared, l.LeaseID
		}
		n.timers = append(n.timers, &g.t)
		return g
	}
	count := rd.uvarint()
	for i := uint64(0); i < count && rd.err == nil; i++ {
		e := &entry{name: rd.string(), delay: timer{slot: -1}}
		if v >= snapshotVersion3 {
			e.index = rd.uvarint()
			if rd.byte() == 1 {
				e.delayed, e.delay.until, e.gone = true, rd.varint(), rd.lease(e.name)
				e.gone.Index = e.index
			}
			holders := rd.uvarint()
			for j := uint64(0); j < holders && rd.err == nil; j++ {
				e.holders = append(e.holders, addLease(rd.lease(e.name)))
			}
		} else {
			l := Lock{Name: e.name, Owner: rd.string(), LeaseID: rd.string(), Token: rd.uvarint(), TTL: rd.varint(), LockDelay: rd.varint(), Deadline: rd.varint()}
			until := rd.varint()
			e.delayed = rd.byte() == 1
			if v >= snapshotVersion2 {
				l.Value = rd.string()
				e.index = rd.uvarint()
			}
			if e.delayed {
				l.Index = e.index
				e.gone, e.delay.until = l, until
			} else if rd.err == nil {
				e.holders = []*lease{addLease(l)}
			}
		}
		if e.delayed {
			e.delay.name, e.delay.kind, e.delay.entry, e.delay.slot = e.name, timerLock, e, len(n.timers)
			n.timers = append(n.timers, &e.delay)
		}
		if rd.err == nil && !e.delayed && len(e.holders) == 0 {
			rd.err = fmt.Errorf("lock %q has no holder", e.name)
		}
		if _, dup := n.locks[e.name]; dup && rd.err == nil {
			rd.err = fmt.Errorf("lock %q twice", e.name)
		}
		n.locks[e.name] = e
	}
	nodes := rd.uvarint()
	for i := uint64(0); i < nodes && rd.err == nil; i++ {
		id := rd.string()
		if _, dup := n.nodes[id]; dup && rd.err == nil {
			rd.err = fmt.Errorf("node %q twice", id)
		}
		n.nodes[id] = rd.string()
	}
	if v >= snapshotVersion3 {
		sessions := rd.uvarint()
		for i := uint64(0); i < sessions && rd.err == nil; i++ {
			s := &session{s: Session{ID: rd.string(), Owner: rd.string(), TTL: rd.varint(), LockDelay: rd.varint(), Deadline: rd.varint(), Index: rd.uvarint()},
				leases: map[*lease]struct{}{}}
			s.t = timer{until: s.s.Deadline, name: s.s.ID, kind: timerSession, sess: s, slot: len(n.timers)}
			n.timers = append(n.timers, &s.t)
			if _, dup := n.sessions[s.s.ID]; dup && rd.err == nil {
				rd.err = fmt.Errorf("session %q twice", s.s.ID)
			}
			n.sessions[s.s.ID] = s
		}
		sems := rd.uvarint()
		for i := uint64(0); i < sems && rd.err == nil; i++ {
			s := &semaphore{name: rd.string(), limit: rd.varint(), index: rd.uvarint()}
			holders := rd.uvarint()
			for j := uint64(0); j < holders && rd.err == nil; j++ {
				s.holders = append(s.holders, addLease(rd.lease(s.name)))
			}
			if rd.err == nil && len(s.holders) == 0 {
				rd.err = fmt.Errorf("semaphore %q has no holder", s.name)
			}
			if _, dup := n.sems[s.name]; dup && rd.err == nil {
				rd.err = fmt.Errorf("semaphore %q twice", s.name)
			}
			n.sems[s.name] = s
		}
	}
	for _, l := range bound {
		s, ok := n.sessions[l.lock.SessionID]
		if !ok {
			if rd.err == nil {
				rd.err = fmt.Errorf("lease of %q in unknown session", l.lock.Name)
			}
			break
		}
		s.leases[l] = struct{}{}
	}
	if v >= snapshotVersion2 {
		n.floor = rd.uvarint()
		tombs := rd.uvarint()
		for i := uint64(0); i < tombs && rd.err == nil; i++ {
			t := &tomb{name: rd.string(), index: rd.uvarint()}
			if _, dup := n.tombs[t.name]; dup && rd.err == nil {
				rd.err = fmt.Errorf("tombstone %q twice", t.name)
			}
			n.tombs[t.name] = t
		}
	}
	if rd.err != nil {
		return fmt.Errorf("%w: %v", ErrBadSnapshot, rd.err)
	}
	if err := n.checkRestored(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	heap.Init(&n.timers)
	n.tombQ = newTombQueue(n.tombs)
	m.mu.Lock()
	m.clock, m.locks, m.sems, m.sessions, m.timers, m.held, m.nodes = n.clock, n.locks, n.sems, n.sessions, n.timers, n.held, n.nodes
	m.tombs, m.tombQ, m.floor = n.tombs, n.tombQ, n.floor
	m.format5 = v >= snapshotVersion3
	m.mu.Unlock()
	return nil
}

// checkRestored refuses a decoded state whose records do not fit together:
// the code that applies the next entries relies on them (a lock holder
// marked as a permit, say, makes its expiry end a permit of a semaphore
// that does not exist, and that panics every replica at the same index).
// Every replica restores the same bytes, so a file that gets past here
// stops the whole cluster at once, not one node; so it is refused whole.
func (n *Machine) checkRestored() error {
	names := make([]string, 0, len(n.locks))
	for name := range n.locks {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := checkLock(n.locks[name]); err != nil {
			return fmt.Errorf("lock %q: %w", name, err)
		}
	}
	names = names[:0]
	for name := range n.sems {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := checkSemaphore(n.sems[name]); err != nil {
			return fmt.Errorf("semaphore %q: %w", name, err)
		}
	}
	ids := make([]string, 0, len(n.sessions))
	for id := range n.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := n.sessions[id]
		switch {
		case s.s.TTL <= 0 || s.s.LockDelay < 0:
			return fmt.Errorf("session %q: ttl %d ms, lock-delay %d ms", id, s.s.TTL, s.s.LockDelay)
		case len(s.leases) > MaxLeasesPerSession:
			return fmt.Errorf("session %q holds %d leases, more than %d", id, len(s.leases), MaxLeasesPerSession)
		}
	}
	return nil
}

func checkLock(e *entry) error {
	if e.delayed && e.gone.Limit != 0 {
		return fmt.Errorf("in lock-delay after a lease marked as a semaphore permit (limit %d)", e.gone.Limit)
	}
	ids := make(map[string]bool, len(e.holders))
	for i, g := range e.holders {
		l := &g.lock
		switch {
		case l.Limit != 0 || l.Slot != 0:
			return fmt.Errorf("holder with token %d is marked as a semaphore permit (limit %d, slot %d)", l.Token, l.Limit, l.Slot)
		case l.Mode != e.holders[0].lock.Mode:
			return fmt.Errorf("exclusive and shared holders together (tokens %d and %d)", e.holders[0].lock.Token, l.Token)
		case i > 0 && l.Mode == ModeExclusive:
			return fmt.Errorf("exclusive lock with %d holders", len(e.holders))
		case i > 0 && l.Token <= e.holders[i-1].lock.Token:
			return fmt.Errorf("holders not in strictly increasing token order (%d after %d)", l.Token, e.holders[i-1].lock.Token)
		case ids[l.LeaseID]:
			return fmt.Errorf("two holders with one lease id (token %d)", l.Token)
		}
		ids[l.LeaseID] = true
	}
	return nil
}

func checkSemaphore(s *semaphore) error {
	if s.limit < 1 || s.limit > MaxSemaphoreLimit {
		return fmt.Errorf("limit %d outside 1..%d", s.limit, MaxSemaphoreLimit)
	}
	if int64(len(s.holders)) > s.limit {
		return fmt.Errorf("%d holders, more than its limit %d", len(s.holders), s.limit)
	}
	ids := make(map[string]bool, len(s.holders))
	for i, g := range s.holders {
		l := &g.lock
		switch {
		case l.Limit != s.limit:
			return fmt.Errorf("permit with token %d has limit %d, the semaphore %d (a permit without a limit is a lock holder)", l.Token, l.Limit, s.limit)
		case l.Mode != ModeExclusive || l.LockDelay != 0:
			return fmt.Errorf("permit with token %d has mode %d, lock-delay %d ms", l.Token, l.Mode, l.LockDelay)
		case int64(l.Slot) >= s.limit:
			return fmt.Errorf("permit with token %d in slot %d, not below the limit %d", l.Token, l.Slot, s.limit)
		case i > 0 && l.Slot <= s.holders[i-1].lock.Slot:
			return fmt.Errorf("permits not in strictly increasing slot order (slot %d after %d: a slot held twice?)", l.Slot, s.holders[i-1].lock.Slot)
		case ids[l.LeaseID]:
			return fmt.Errorf("two permits with one lease id (slot %d)", l.Slot)
		}
		ids[l.LeaseID] = true
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// snapReader reads snapshot fields, remembering the first error.
type snapReader struct {
	r   *bufio.Reader
	err error
}

func (s *snapReader) uvarint() uint64 {
	if s.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(s.r)
	s.err = err
	return v
}

func (s *snapReader) varint() int64 {
	if s.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(s.r)
	s.err = err
	return v
}

func (s *snapReader) byte() byte {
	if s.err != nil {
		return 0
	}
	b, err := s.r.ReadByte()
	s.err = err
	return b
}

// maxSnapString bounds one string so a corrupt length cannot allocate gigabytes.
const maxSnapString = 1 << 20

func (s *snapReader) string() string {
	n := s.uvarint()
	if s.err != nil {
		return ""
	}
	if n > maxSnapString {
		s.err = fmt.Errorf("string of %d bytes", n)
		return ""
	}
	b := make([]byte, n)
	_, s.err = io.ReadFull(s.r, b)
	return string(b)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
