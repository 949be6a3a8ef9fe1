package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, roots, floor uint64
		base, want         int
	}{
		{live: 4 * mib, floor: 64 * mib, base: 100, want: 1500},
		{live: 32 * mib, floor: 64 * mib, base: 100, want: 100},                 // the base is the least
		{live: 16 * mib, floor: 64 * mib, base: 100, want: 300},                 // goal 16 + 48
		{live: 16 * mib, floor: 64 * mib, base: 500, want: 500},                 // a GOGC above the floor's wins
		{live: 64 * mib, floor: 64 * mib, base: 100, want: 100},                 // at the floor
		{live: 900 * mib, floor: 64 * mib, base: 100, want: 100},                // above it
		{live: 0, floor: 64 * mib, base: 100, want: 1600},                       // no heap yet: the minimum goal is the floor
		{live: 10, floor: 64 * mib, base: 100, want: 1600},                      // 4 MiB * 1600 / 100 = 64 MiB
		{live: 3 * mib, floor: 64 * mib, base: 100, want: 1600},                 // 64 MiB, not 3 * 21.3
		{live: 1 * mib, floor: 2 * mib, base: 100, want: 100},                   // a floor under Go's minimum changes nothing
		{live: 3 * mib, roots: 29 * mib, floor: 64 * mib, base: 100, want: 190}, // stacks count: 3 + 32 * 1.9 = 64
		{live: 4 * mib, floor: 100 << 40, base: 100, want: maxPercent},          // a huge floor never wraps GOGC negative
		{live: 4 * mib, floor: ^uint64(0), base: 100, want: maxPercent},
	} {
		if got := Percent(c.live, c.roots, c.floor, c.base); got != c.want {
			t.Errorf("Percent(live %d, roots %d, floor %d, base %d) = %d, want %d", c.live, c.roots, c.floor, c.base, got, c.want)
		}
	}
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes of garbage in small objects, as a node serving
// requests does.
func churn(n int) {
	for range n / 1024 {
		sink = make([]byte, 1024)
	}
}

// TestKeepCollectsLessOftenAndFollowsTheLiveHeap: with a floor, garbage
// far past Go's 4 MiB minimum starts no collection; GOGC follows the live
// heap after each collection, back to the base once the live heap passes
// the floor; stop restores the process's own GOGC.
func TestKeepCollectsLessOftenAndFollowsTheLiveHeap(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	runtime.GC()

	before := gcCycles()
	churn(48 << 20)
	without := gcCycles() - before
	if without < 4 {
		t.Fatalf("without a floor 48 MiB of garbage took %d collections; the comparison below needs Go's default pacing", without)
	}

	stop := Keep(256 << 20)
	runtime.GC() // a clean start: the finalizer has run at least once after this
	before = gcCycles()
	churn(48 << 20)
	if with := gcCycles() - before; with > 1 {
		t.Errorf("with a 256 MiB floor, 48 MiB of garbage took %d collections (%d without)", with, without)
	}

	// A live heap past the floor: GOGC goes back to the base.
	live := make([]byte, 300<<20)
	waitGOGC(t, "the base, with the live heap past the floor", func(p int) bool { return p == 100 })
	runtime.KeepAlive(live)
	live = nil
	waitGOGC(t, "a raised GOGC once the heap is small again", func(p int) bool { return p > 1000 })

	stop()
	if p := gogc(); p != 100 {
		t.Errorf("after stop GOGC is %d, want the base 100", p)
	}
	runtime.GC()
	churn(8 << 20) // no finalizer of the stopped keeper may raise it again
	runtime.GC()
	if p := gogc(); p != 100 {
		t.Errorf("after stop and more collections GOGC is %d, want 100", p)
	}
}

// waitGOGC collects until GOGC satisfies ok: the keeper's finalizer runs
// on the finalizer goroutine after a collection, not within it.
func waitGOGC(t *testing.T, what string, ok func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		p := gogc()
		if ok(p) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d after 10s of collections; want %s", p, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// park holds a goroutine depth frames deep, each with a 1 KiB frame,
// until release is closed.
func park(depth int, release <-chan struct{}) byte {
	var frame [1024]byte
	if depth == 0 {
		<-release
		return frame[0]
	}
	frame[depth%1024] = byte(depth)
	return park(depth-1, release) + frame[0]
}

// TestKeepCountsGoroutineStacks: the runtime's goal multiplies the
// stacks by GOGC too, so a small heap beside deep parked goroutines
// (acquires parked with wait_ms, say) must not be given the GOGC of a
// small heap alone: its goal stays near the floor.
func TestKeepCountsGoroutineStacks(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	release := make(chan struct{})
	var parked sync.WaitGroup
	for range 2000 {
		parked.Add(1)
		go func() { defer parked.Done(); park(16, release) }()
	}
	defer func() { close(release); parked.Wait() }()
	stop := Keep(64 << 20)
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		goal := heapGoal()
		if goal <= 96<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heap goal %d MiB with 2,000 goroutines parked 16 KiB deep and a 64 MiB floor; want under 96 MiB", goal>>20)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKeepOffWithoutFloorOrWithGCOff(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	Keep(0)()
	if p := gogc(); p != 100 {
		t.Errorf("Keep(0) changed GOGC to %d", p)
	}
	debug.SetGCPercent(-1)
	stop := Keep(64 << 20)
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("Keep with GOGC=off set GOGC to %d", p)
	}
	stop()
	if p := debug.SetGCPercent(100); p != -1 {
		t.Errorf("stop of a Keep with GOGC=off set GOGC to %d", p)
	}
}
