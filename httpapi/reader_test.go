package httpapi

import (
	"context"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// fakeReader is a LockReader over canned state, for the read shapes of
// shared locks, sessions and semaphores without depending on how the state
// machine gets there. Locks map to their holders by token.
type fakeReader struct {
	locks    map[string][]fsm.Lock
	sessions map[string]fsm.Session
	sems     map[string]fsm.Semaphore
}

func (r *fakeReader) Get(name string) (fsm.Lock, bool) {
	hs := r.locks[name]
	if len(hs) == 0 {
		return fsm.Lock{}, false
	}
	return hs[0], true
}

func (r *fakeReader) List(prefix string, limit int) ([]fsm.Lock, bool) {
	l, more, _ := r.ListIndexed(prefix, limit)
	return l, more
}

func (r *fakeReader) Index(name string) uint64 {
	_, _, idx := r.Lookup(name)
	return idx
}

func (r *fakeReader) PrefixIndex(prefix string) uint64 {
	_, _, idx := r.ListIndexed(prefix, 1<<30)
	return idx
}

func (r *fakeReader) Lookup(name string) (fsm.Lock, bool, uint64) {
	l, ok := r.Get(name)
	return l, ok, l.Index
}

// ListIndexed lists in map order; tests list at most one lock.
func (r *fakeReader) ListIndexed(prefix string, limit int) ([]fsm.Lock, bool, uint64) {
	var out []fsm.Lock
	var idx uint64
	for name, hs := range r.locks {
		if strings.HasPrefix(name, prefix) && len(hs) > 0 {
			out = append(out, hs[0])
			idx = max(idx, hs[0].Index)
		}
	}
	return out, false, idx
}

func (r *fakeReader) Holders(name string) []fsm.Lock {
	return append([]fsm.Lock(nil), r.locks[name]...)
}

func (r *fakeReader) LookupHolders(name string) ([]fsm.Lock, uint64) {
	hs := r.Holders(name)
	if len(hs) == 0 {
		return nil, 0
	}
	return hs, hs[0].Index
}

func (r *fakeReader) Session(id string) (fsm.Session, bool) {
	s, ok := r.sessions[id]
	return s, ok
}

func (r *fakeReader) Semaphore(name string) (fsm.Semaphore, bool) {
	s, ok := r.sems[name]
	return s, ok
}

// fakeLeaderReader adds the leader's view: time left against a clock at
// now (FSM nanoseconds), and parked acquires.
type fakeLeaderReader struct {
	*fakeReader
	now        int64
	waiters    map[string]int
	semWaiters map[string]int
}

func (r fakeLeaderReader) Remaining(l fsm.Lock) (time.Duration, bool) {
	return time.Duration(max(l.Deadline-r.now, 0)), true
}

func (r fakeLeaderReader) Waiters(name string) int          { return r.waiters[name] }
func (r fakeLeaderReader) SemaphoreWaiters(name string) int { return r.semWaiters[name] }

var (
	_ nodeapi.LockReader = (*fakeReader)(nil)
	_ nodeapi.LeaseView  = fakeLeaderReader{}
)

// readingLeader is a leader whose reads see r.
func readingLeader(r nodeapi.LockReader) *fakeStore {
	f := newLeader("n1")
	f.read = func(context.Context, bool) (nodeapi.LockReader, error) { return r, nil }
	return f
}
