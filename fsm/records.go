package fsm

import (
	"bytes"
	"sort"
)

// ClusterIDKey is the node-table key under which the state keeps its
// cluster's id. Node ids are [A-Za-z0-9._-], so no node has it; the node
// table is in every snapshot version and OpSetNode in every command version,
// so every build carries the id and none shows it as a node.
const ClusterIDKey = "#cluster-id"

// ClusterID returns the id the state's cluster was given by its first
// leader, "" if none was yet.
func (m *Machine) ClusterID() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.nodes[ClusterIDKey]
}

// Visitor receives a state's records (Machine.Visit); a nil field skips
// that kind. Holders and leases are as stored: a session's leases have TTL,
// LockDelay and Deadline 0 (the session's apply).
type Visitor struct {
	// Lock: a held lock, holders by token, or one in its lock-delay until
	// the FSM clock reads until, expired being the lease whose expiry
	// started it (holders then empty).
	Lock      func(name string, index uint64, holders []Lock, delayed bool, until int64, expired Lock) error
	Session   func(s Session) error
	Semaphore func(name string, limit int64, index uint64, holders []Lock) error
	// Tombstone: a freed lock's last index; floor is every older one's.
	Tombstone func(name string, index uint64) error
}

// Visit calls v for every record of the state, in name (or id) order, and
// stops at the first error, which it returns.
func (m *Machine) Visit(v Visitor) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if v.Lock != nil {
		for _, name := range sortedKeys(m.locks) {
			e := m.locks[name]
			holders := make([]Lock, len(e.holders))
			for i, l := range e.holders {
				holders[i] = l.lock
			}
			if err := v.Lock(name, e.index, holders, e.delayed, e.delay.until, e.gone); err != nil {
				return err
			}
		}
	}
	if v.Session != nil {
		for _, id := range sortedKeys(m.sessions) {
			if err := v.Session(m.sessions[id].s); err != nil {
				return err
			}
		}
	}
	if v.Semaphore != nil {
		for _, name := range sortedKeys(m.sems) {
			s := m.sems[name]
			holders := make([]Lock, len(s.holders))
			for i, l := range s.holders {
				holders[i] = l.lock
			}
			if err := v.Semaphore(name, s.limit, s.index, holders); err != nil {
				return err
			}
		}
	}
	if v.Tombstone != nil {
		for _, name := range sortedKeys(m.tombs) {
			if err := v.Tombstone(name, m.tombs[name].index); err != nil {
				return err
			}
		}
	}
	return nil
}

// Floor is the index every freed lock without a tombstone reads.
func (m *Machine) Floor() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.floor
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// PrepareRestore rewrites a snapshot that is about to replace a running
// cluster's state (a backup restored through Raft), at index or later; see
// Machine.PrepareRestore. The snapshot's own node table is kept.
func PrepareRestore(snap []byte, index uint64) ([]byte, error) {
	m := New()
	if err := m.Restore(bytes.NewReader(snap)); err != nil {
		return nil, err
	}
	m.PrepareRestore(index, nil)
	var out bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// PrepareRestore readies a restored backup state m to replace a running
// cluster's state at index or later:
//   - its clock's term becomes 0, a term no log entry has, so the next entry
//     starts the FSM clock afresh, as a new leader's first entry does,
//     instead of adding the time since the backup was taken (which would
//     shorten the restored leases when the backup came from the current
//     term);
//   - every lock's, session's and semaphore's index, every tombstone and
//     the floor become at least index: the restore changed every lock, and
//     indexes must never go down for watchers that saw later ones before it;
//   - with live non-nil, the node table becomes live's (the running
//     cluster's members' addresses and its cluster id): a backup's table
//     names the nodes of the cluster it came from, at the time it was taken,
//     and a follower forwards with what the table says.
//
// Every replica installs the snapshot of the result, so they stay identical.
func (m *Machine) PrepareRestore(index uint64, live *Machine) {
	var nodes map[string]string
	if live != nil {
		live.mu.RLock()
		nodes = make(map[string]string, len(live.nodes))
		for id, addr := range live.nodes {
			nodes[id] = addr
		}
		live.mu.RUnlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock.Term = 0
	for _, e := range m.locks {
		e.index = max(e.index, index)
		if e.delayed {
			e.gone.Index = e.index
		}
	}
	for _, s := range m.sessions {
		s.s.Index = max(s.s.Index, index)
	}
	for _, s := range m.sems {
		s.index = max(s.index, index)
	}
	for _, t := range m.tombs {
		t.index = max(t.index, index)
	}
	m.tombQ = newTombQueue(m.tombs)
	m.floor = max(m.floor, index)
	if nodes != nil {
		m.nodes = nodes
	}
}
