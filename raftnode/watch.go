package raftnode

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Blocking reads (GET /v1/locks/{name}?index=N&wait_ms=M) park on the node
// that received them and are woken by that node's own apply: the FSM
// adapter's applied callback hands the names an entry changed
// (fsm.Result.Changed) to the hub, which closes the channels of the
// watchers of those names and of the prefixes above them. A watcher costs a
// map entry and a channel, no goroutine beyond its request's, and the leader
// does nothing per watcher: each node wakes its own.

// watchHub holds the parked watchers of one node.
type watchHub struct {
	mu       sync.Mutex
	names    map[string]map[*watcher]struct{}
	prefixes map[string]map[*watcher]struct{}
	count    atomic.Int64 // watchers parked: applies skip the lock when 0
}

// watcher is one parked read; ch is closed when it is woken.
type watcher struct {
	key    string
	prefix bool
	ch     chan struct{}
}

func newWatchHub() *watchHub {
	return &watchHub{names: make(map[string]map[*watcher]struct{}), prefixes: make(map[string]map[*watcher]struct{})}
}

// Watch returns a channel closed when an entry this node applies changes
// lock key (with prefix: any lock whose name starts with key), or when a
// snapshot replaces the node's state. The caller re-reads the state after a
// wake-up (it may be spurious) and calls cancel when it stops waiting.
func (n *Node) Watch(key string, prefix bool) (<-chan struct{}, func()) {
	return n.watches.add(key, prefix)
}

func (h *watchHub) add(key string, prefix bool) (<-chan struct{}, func()) {
	w := &watcher{key: key, prefix: prefix, ch: make(chan struct{})}
	h.mu.Lock()
	table := h.names
	if prefix {
		table = h.prefixes
	}
	set := table[key]
	if set == nil {
		set = make(map[*watcher]struct{})
		table[key] = set
	}
	set[w] = struct{}{}
	h.count.Add(1)
	h.mu.Unlock()
	return w.ch, func() { h.remove(w) }
}

// remove drops w if it is still parked (a woken watcher is already gone).
func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	table := h.names
	if w.prefix {
		table = h.prefixes
	}
	if set, ok := table[w.key]; ok {
		if _, ok := set[w]; ok {
			delete(set, w)
			h.count.Add(-1)
			if len(set) == 0 {
				delete(table, w.key)
			}
		}
	}
}

// wake closes the channels of every watcher of the changed names and of
// the prefixes they start with. It runs on Raft's FSM goroutine and never
// blocks on a watcher. Cost: one map lookup per name, plus one HasPrefix
// per distinct watched prefix per name.
func (h *watchHub) wake(changed []string) {
	if len(changed) == 0 || h.count.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range changed {
		if set, ok := h.names[name]; ok {
			h.release(set)
			delete(h.names, name)
		}
		for p, set := range h.prefixes {
			if strings.HasPrefix(name, p) {
				h.release(set)
				delete(h.prefixes, p)
			}
		}
	}
}

// wakeAll wakes every watcher: the state was replaced by a snapshot, so any
// lock may have changed.
func (h *watchHub) wakeAll() {
	if h.count.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, set := range h.names {
		h.release(set)
		delete(h.names, k)
	}
	for k, set := range h.prefixes {
		h.release(set)
		delete(h.prefixes, k)
	}
}

func (h *watchHub) release(set map[*watcher]struct{}) {
	for w := range set {
		close(w.ch)
	}
	h.count.Add(-int64(len(set)))
}
