package fsm

import (
	"bytes"
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// heapTombs is the tombstone pruning as it was before tombQueue: a heap
// ordered by (index, name), kept here as the reference.
type heapTombs struct {
	tombs map[string]*heapTomb
	h     heapTombHeap
	floor uint64
	max   int
}

type heapTomb struct {
	name  string
	index uint64
	slot  int
}

type heapTombHeap []*heapTomb

func (h heapTombHeap) Len() int { return len(h) }
func (h heapTombHeap) Less(i, j int) bool {
	if h[i].index != h[j].index {
		return h[i].index < h[j].index
	}
	return h[i].name < h[j].name
}
func (h heapTombHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}
func (h *heapTombHeap) Push(x any) {
	t := x.(*heapTomb)
	t.slot = len(*h)
	*h = append(*h, t)
}
func (h *heapTombHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

func newHeapTombs(m *Machine) *heapTombs {
	r := &heapTombs{tombs: map[string]*heapTomb{}, floor: m.floor, max: m.maxTombs}
	for name, t := range m.tombs {
		ht := &heapTomb{name: name, index: t.index}
		r.tombs[name] = ht
		heap.Push(&r.h, ht)
	}
	return r
}

func (r *heapTombs) bury(name string, index uint64) {
	r.unbury(name)
	t := &heapTomb{name: name, index: index}
	r.tombs[name] = t
	heap.Push(&r.h, t)
	for len(r.h) > r.max {
		old := heap.Pop(&r.h).(*heapTomb)
		delete(r.tombs, old.name)
		r.floor = max(r.floor, old.index)
	}
}

func (r *heapTombs) unbury(name string) {
	if t, ok := r.tombs[name]; ok {
		heap.Remove(&r.h, t.slot)
		delete(r.tombs, name)
	}
}

// trace makes r hear m's burials.
func (r *heapTombs) trace(m *Machine) {
	m.tombTrace = func(buried bool, name string, index uint64) {
		if buried {
			r.bury(name, index)
		} else {
			r.unbury(name)
		}
	}
}

func (r *heapTombs) differs(m *Machine) string {
	if r.floor != m.floor || len(r.tombs) != len(m.tombs) {
		return fmt.Sprintf("floor %d, %d tombstones; the heap: floor %d, %d", m.floor, len(m.tombs), r.floor, len(r.tombs))
	}
	for name, t := range r.tombs {
		if mt, ok := m.tombs[name]; !ok || mt.index != t.index {
			return fmt.Sprintf("tombstone %q: %v; the heap: index %d", name, mt, t.index)
		}
	}
	return ""
}

// genTombLog is a log that buries many locks per entry, out of name order
// (expiries come by deadline, then name), re-acquires some, and releases
// others: many names, a few TTLs, ticks that settle up to the cap.
func genTombLog(rng *rand.Rand, length, names int) []logEntry {
	var out []logEntry
	stamp := int64(0)
	for i := 0; i < length; i++ {
		name := "t/" + strconv.Itoa(rng.IntN(names))
		lease := "L" + strconv.Itoa(rng.IntN(2))
		var c Command
		switch rng.IntN(6) {
		case 0, 1, 2:
			c = acquire(name, lease, int64(1+rng.IntN(3))*100)
		case 3:
			c = release(name, lease)
		default:
			stamp += int64(rng.IntN(3)) * 100 * ms
			c = tick()
		}
		c.Stamp = stamp
		out = append(out, logEntry{uint64(i + 1), 1, c.Encode(nil)})
	}
	return out
}

// Tombstones pruned through tombQueue are exactly those the heap pruned,
// entry by entry, on random logs (genLog's, and genTombLog's with many
// burials per entry), tiny and larger caps, and after restores, including
// PrepareRestore's raised indexes (tombstones newer than the next entries,
// which the queue must order again). The restore-anywhere tests then show
// the snapshot bytes are unchanged.
func TestTombQueuePrunesAsTheHeapDid(t *testing.T) {
	for seed := uint64(0); seed < 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 16))
		var entries []logEntry
		maxTombs := 1 + rng.IntN(4)
		if seed%2 == 0 {
			entries = genLog(rng.IntN, 300)
		} else {
			maxTombs = 1 + rng.IntN(40)
			entries = genTombLog(rng, 600, 64)
		}
		m := New()
		m.maxTombs, m.maxExpiries, m.maxCommandExpiries = maxTombs, 1+rng.IntN(8), rng.IntN(3)
		ref := &heapTombs{tombs: map[string]*heapTomb{}, max: maxTombs}
		ref.trace(m)
		restoreAt := rng.IntN(len(entries))
		for i, e := range entries {
			if _, err := m.Apply(e.index, e.term, e.data); err != nil {
				t.Fatalf("seed %d entry %d: %v", seed, e.index, err)
			}
			if d := ref.differs(m); d != "" {
				t.Fatalf("seed %d (cap %d), after entry %d: %s", seed, maxTombs, e.index, d)
			}
			if i != restoreAt {
				continue
			}
			var buf bytes.Buffer
			if _, err := m.Snapshot().WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			snap := buf.Bytes()
			if seed%3 == 0 {
				var err error
				if snap, err = PrepareRestore(snap, e.index+uint64(rng.IntN(5))); err != nil {
					t.Fatal(err)
				}
			}
			restored := New()
			restored.maxTombs, restored.maxExpiries, restored.maxCommandExpiries = m.maxTombs, m.maxExpiries, m.maxCommandExpiries
			if err := restored.Restore(bytes.NewReader(snap)); err != nil {
				t.Fatal(err)
			}
			m, ref = restored, newHeapTombs(restored)
			ref.trace(m)
		}
	}
}
