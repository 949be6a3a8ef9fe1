package fsm

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
)

// snapshotMagic opens every snapshot; snapshotVersion follows it so that a
// newer format is refused clearly instead of misread.
//
// Version 2 adds each lock's value and index, then after the nodes the
// tombstone floor and the tombstones (name, index) sorted by name. Version 1
// is still read: indexes 0, no values, no tombstones.
const (
	snapshotMagic    = "RAFTLOCK-SNAP"
	snapshotVersion1 = 1
	snapshotVersion  = 2
)

// ErrBadSnapshot is returned by Restore for data it cannot read.
var ErrBadSnapshot = errors.New("fsm: malformed snapshot")

// PrepareRestore rewrites a snapshot that is about to replace a running
// cluster's state (a backup restored through Raft), at index or later:
//   - its clock's term becomes 0, a term no log entry has, so the next entry
//     starts the FSM clock afresh, as a new leader's first entry does,
//     instead of adding the time since the backup was taken (which would
//     shorten the restored leases when the backup came from the current
//     term);
//   - every lock's index, every tombstone and the floor become at least
//     index: the restore changed every lock, and indexes must never go down
//     for watchers that saw later ones before it.
//
// Every replica installs the same rewritten bytes, so they stay identical.
func PrepareRestore(snap []byte, index uint64) ([]byte, error) {
	m := New()
	if err := m.Restore(bytes.NewReader(snap)); err != nil {
		return nil, err
	}
	m.clock.Term = 0
	for _, e := range m.locks {
		e.lock.Index = max(e.lock.Index, index)
	}
	for _, t := range m.tombs {
		t.index = max(t.index, index)
	}
	heap.Init(&m.tombHeap)
	m.floor = max(m.floor, index)
	var out bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Snapshot is a point-in-time copy of the state, taken under the lock so it
// can be written out while Apply goes on.
type Snapshot struct {
	clock   Clock
	entries []entry
	nodes   map[string]string
	tombs   []tomb
	floor   uint64
}

// Snapshot copies the state. Copying values (not pointers) keeps the copy
// independent of later applies.
func (m *Machine) Snapshot() *Snapshot {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := &Snapshot{clock: m.clock, entries: make([]entry, 0, len(m.locks)), nodes: make(map[string]string, len(m.nodes))}
	for _, e := range m.locks {
		s.entries = append(s.entries, *e)
	}
	for id, addr := range m.nodes {
		s.nodes[id] = addr
	}
	s.tombs = make([]tomb, 0, len(m.tombs))
	for _, t := range m.tombs {
		s.tombs = append(s.tombs, tomb{name: t.name, index: t.index})
	}
	s.floor = m.floor
	return s
}

// WriteTo writes the snapshot in the versioned binary format. Locks are
// sorted by name so equal states write equal bytes.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) { return s.write(w, true) }

// WriteOutcomeStateTo writes what decides the answer to every later entry:
// the clock, the locks with their holders, deadlines, lock-delays and values,
// and the node table, in the snapshot's canonical order, without the watch
// bookkeeping (each lock's last-change index, the tombstones of freed locks
// and their floor). Replicas compare hashes of these bytes. The bookkeeping
// is left out because replicas may disagree on it without disagreeing on
// any lock: a node that restored a format-1 snapshot (written before
// indexes existed) has index 0 where one that replayed the same stretch of
// log has the real indexes, until those locks change again.
func (s *Snapshot) WriteOutcomeStateTo(w io.Writer) (int64, error) { return s.write(w, false) }

func (s *Snapshot) write(w io.Writer, watchMeta bool) (int64, error) {
	sort.Slice(s.entries, func(i, j int) bool { return s.entries[i].lock.Name < s.entries[j].lock.Name })
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	var buf []byte
	buf = append(buf, snapshotMagic...)
	buf = binary.AppendUvarint(buf, snapshotVersion)
	buf = binary.AppendVarint(buf, s.clock.Now)
	buf = binary.AppendUvarint(buf, s.clock.Term)
	buf = binary.AppendVarint(buf, s.clock.Stamp)
	buf = binary.AppendUvarint(buf, s.clock.Index)
	buf = binary.AppendUvarint(buf, uint64(len(s.entries)))
	for i := range s.entries {
		e := &s.entries[i]
		buf = appendString(buf, e.lock.Name)
		buf = appendString(buf, e.lock.Owner)
		buf = appendString(buf, e.lock.LeaseID)
		buf = binary.AppendUvarint(buf, e.lock.Token)
		buf = binary.AppendVarint(buf, e.lock.TTL)
		buf = binary.AppendVarint(buf, e.lock.LockDelay)
		buf = binary.AppendVarint(buf, e.lock.Deadline)
		buf = binary.AppendVarint(buf, e.until)
		if e.delayed {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
		buf = appendString(buf, e.lock.Value)
		if watchMeta {
			buf = binary.AppendUvarint(buf, e.lock.Index)
		}
		if len(buf) > 32<<10 {
			if _, err := bw.Write(buf); err != nil {
				return cw.n, fmt.Errorf("write snapshot: %w", err)
			}
			buf = buf[:0]
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
		if len(buf) > 32<<10 {
			if _, err := bw.Write(buf); err != nil {
				return cw.n, fmt.Errorf("write snapshot: %w", err)
			}
			buf = buf[:0]
		}
	}
	if _, err := bw.Write(buf); err != nil {
		return cw.n, fmt.Errorf("write snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("write snapshot: %w", err)
	}
	return cw.n, nil
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
	if rd.err == nil && v != snapshotVersion && v != snapshotVersion1 {
		return fmt.Errorf("%w: unsupported version %d", ErrBadSnapshot, v)
	}
	n := New()
	n.clock = Clock{Now: rd.varint(), Term: rd.uvarint(), Stamp: rd.varint(), Index: rd.uvarint()}
	count := rd.uvarint()
	for i := uint64(0); i < count && rd.err == nil; i++ {
		e := &entry{}
		e.lock.Name = rd.string()
		e.lock.Owner = rd.string()
		e.lock.LeaseID = rd.string()
		e.lock.Token = rd.uvarint()
		e.lock.TTL = rd.varint()
		e.lock.LockDelay = rd.varint()
		e.lock.Deadline = rd.varint()
		e.until = rd.varint()
		e.delayed = rd.byte() == 1
		if v >= snapshotVersion {
			e.lock.Value = rd.string()
			e.lock.Index = rd.uvarint()
		}
		if !e.delayed {
			n.held++
		}
		e.slot = len(n.timers)
		n.timers = append(n.timers, e)
		n.locks[e.lock.Name] = e
	}
	nodes := rd.uvarint()
	for i := uint64(0); i < nodes && rd.err == nil; i++ {
		id := rd.string()
		n.nodes[id] = rd.string()
	}
	if v >= snapshotVersion {
		n.floor = rd.uvarint()
		tombs := rd.uvarint()
		for i := uint64(0); i < tombs && rd.err == nil; i++ {
			t := &tomb{name: rd.string(), index: rd.uvarint(), slot: len(n.tombHeap)}
			n.tombHeap = append(n.tombHeap, t)
			n.tombs[t.name] = t
		}
	}
	if rd.err != nil {
		return fmt.Errorf("%w: %v", ErrBadSnapshot, rd.err)
	}
	heap.Init(&n.timers)
	heap.Init(&n.tombHeap)
	m.mu.Lock()
	m.clock, m.locks, m.timers, m.held, m.nodes = n.clock, n.locks, n.timers, n.held, n.nodes
	m.tombs, m.tombHeap, m.floor = n.tombs, n.tombHeap, n.floor
	m.mu.Unlock()
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
