package fsm

import (
	"cmp"
	"slices"
	"strings"
)

// tomb is a freed lock's index (DESIGN.md, "Lock indexes").
type tomb struct {
	name    string
	index   uint64
	dead    bool // unburied or pruned while still in the queue
	pending bool // buried by the entry being applied: in tombQueue.pending
}

// olderTomb is the pruning order: index, then name (total, so which
// tombstone goes never depends on how they are stored).
func olderTomb(a, b *tomb) int {
	if c := cmp.Compare(a.index, b.index); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// tombQueue holds the tombstones oldest first, so that pruning the oldest
// costs O(1) where a heap of 65,536 cost O(log n) string compares per
// burial (half of a mass expiry's settle time, requests-perf16.md). A
// burial takes the index of the entry being applied, which only grows, so
// each entry's burials, sorted by name at its end, follow every earlier
// one: the queue stays in (index, name) order. An unburied tombstone is
// marked dead and skipped when it reaches the front. The order, and so
// which tombstones are pruned and the state, are exactly the heap's
// (TestTombQueuePrunesAsTheHeapDid).
type tombQueue struct {
	queue   []*tomb // earlier entries' tombstones in (index, name) order
	head    int     // queue[:head] are gone
	dead    int     // dead tombstones in queue[head:]
	pending []*tomb // the current entry's, in burial order, dead ones too
}

// newTombQueue orders tombs (a restored state's) for pruning.
func newTombQueue(tombs map[string]*tomb) tombQueue {
	q := tombQueue{queue: make([]*tomb, 0, len(tombs))}
	for _, t := range tombs {
		q.queue = append(q.queue, t)
	}
	slices.SortFunc(q.queue, olderTomb)
	return q
}

// kill takes a live tombstone out (its lock is held again).
func (q *tombQueue) kill(t *tomb) {
	t.dead = true
	if !t.pending {
		q.dead++
		q.compact()
	}
}

// popOldest removes and returns the oldest live tombstone, of those in the
// queue and those the entry at index buried so far; there is one.
func (q *tombQueue) popOldest(index uint64) *tomb {
	for q.head < len(q.queue) && q.queue[q.head].dead {
		q.queue[q.head] = nil
		q.head++
		q.dead--
	}
	var front *tomb
	if q.head < len(q.queue) {
		front = q.queue[q.head]
		if front.index < index {
			// Every tombstone of this entry has index: front is older.
			q.queue[q.head] = nil
			q.head++
			return front
		}
	}
	// Rare: the queue is empty (this entry prunes its own, only with a
	// tiny maxTombs), or a restore raised its indexes to this entry's.
	i := -1
	for j, t := range q.pending {
		if !t.dead && (i < 0 || t.name < q.pending[i].name) {
			i = j
		}
	}
	if i < 0 || front != nil && olderTomb(front, q.pending[i]) < 0 {
		q.queue[q.head] = nil
		q.head++
		return front
	}
	t := q.pending[i]
	q.pending = slices.Delete(q.pending, i, i+1)
	return t
}

// endEntry moves the entry's live tombstones, by name, behind the earlier
// ones.
func (q *tombQueue) endEntry() {
	if len(q.pending) == 0 {
		return
	}
	live := q.pending[:0]
	for _, t := range q.pending {
		if !t.dead {
			t.pending = false
			live = append(live, t)
		}
	}
	slices.SortFunc(live, olderTomb)
	inOrder := len(live) == 0 || q.head == len(q.queue) || olderTomb(q.queue[len(q.queue)-1], live[0]) < 0
	q.queue = append(q.queue, live...)
	clear(q.pending)
	q.pending = q.pending[:0]
	if !inOrder {
		// Only after a restore raised tombstones' indexes past this
		// entry's (PrepareRestore): order the whole queue again.
		slices.SortFunc(q.queue[q.head:], olderTomb)
	}
	q.compact()
}

// compact drops the gone and dead tombstones once they are half the
// queue, so its length stays within twice the live count (amortized O(1)).
func (q *tombQueue) compact() {
	gone := q.head + q.dead
	if gone < 1024 || gone < len(q.queue)/2 {
		return
	}
	out := make([]*tomb, 0, len(q.queue)-gone)
	for _, t := range q.queue[q.head:] {
		if !t.dead {
			out = append(out, t)
		}
	}
	q.queue, q.head, q.dead = out, 0, 0
}
