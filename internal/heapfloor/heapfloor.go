// Package heapfloor lets a small Go heap grow to a floor before it is
// collected.
//
// Go starts a collection once the heap has grown by GOGC percent over
// what the last one left live, and at least at 4 MiB. A node's live heap
// is a few MiB while it allocates tens of MiB per second serving writes,
// so with Go's defaults it collected about fourteen times a second, and
// each collection's fixed costs (its phases, waking every P for marking,
// scanning every goroutine's stack) showed as about 5% of the three
// nodes' CPU per lock. Keep raises GOGC while the live heap is small, so
// that the next collection starts near the floor instead; once the live
// heap exceeds the floor, GOGC is the process's own again. A memory limit
// (GOMEMLIMIT, debug.SetMemoryLimit) still makes the runtime collect
// sooner near it, whatever GOGC says.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// heapMinimum is the runtime's least heap goal at GOGC=100; it scales
// with GOGC (runtime/mgcpacer.go, defaultHeapMinimum).
const heapMinimum = 4 << 20

// maxPercent bounds the GOGC Percent returns, far inside the int32 that
// the runtime keeps it in: past it, a huge floor would wrap to a negative
// GOGC, which turns collection off.
const maxPercent = 1 << 20

// Percent is the GOGC that makes a heap with live bytes live and roots
// bytes of goroutine stacks and globals start its next collection at
// about floor bytes, and never below base, the process's own GOGC. The
// runtime's goal is the larger of live + (live + roots) * GOGC/100 and
// 4 MiB * GOGC/100, so GOGC is also at most floor / 4 MiB * 100: a nearly
// empty heap (before the first collection, say) would otherwise be given
// a goal far past the floor.
func Percent(live, roots, floor uint64, base int) int {
	limit := min(floor/heapMinimum*100, maxPercent)
	p := limit
	if floor <= live {
		p = 0
	} else if q := (floor - live) / max(1, (live+roots)/100); q < limit {
		p = q
	}
	if p < uint64(base) {
		return base
	}
	return int(p)
}

// Keep sets GOGC from the live heap now and again after every
// collection, until stop is called. It does nothing (and stop does
// nothing) when floor is 0 or collection is off (GOGC=off).
func Keep(floor uint64) (stop func()) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if floor == 0 || base < 0 {
		return func() {}
	}
	k := &keeper{floor: floor, base: base, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}}
	k.adjust()
	k.arm()
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if !k.stopped {
			k.stopped = true
			debug.SetGCPercent(base)
		}
	}
}

type keeper struct {
	floor uint64
	base  int

	mu      sync.Mutex
	stopped bool
	sample  []metrics.Sample
}

// arm sets a finalizer on a fresh object: it runs after the next
// collection that finds the object unreachable, that is after the next
// collection, and arms the one after.
func (k *keeper) arm() {
	sentinel := new([16]byte)
	runtime.SetFinalizer(sentinel, func(*[16]byte) {
		if k.adjust() {
			k.arm()
		}
	})
}

// adjust sets GOGC for the live heap now, unless stopped; it reports
// whether it did.
func (k *keeper) adjust() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return false
	}
	metrics.Read(k.sample)
	live, roots := value(k.sample[0]), value(k.sample[2])+value(k.sample[3])
	if live == 0 {
		live = value(k.sample[1]) // before the first collection: what is allocated
	}
	debug.SetGCPercent(Percent(live, roots, k.floor, k.base))
	return true
}

func value(s metrics.Sample) uint64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s.Value.Uint64()
}
