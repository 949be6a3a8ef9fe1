package fsm

import (
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkExpireEntry times the one entry that settles MaxExpiriesPerEntry
// of 100,000 leases due at one instant: the longest the apply loop (and the
// machine's lock) is held during a mass expiry.
func BenchmarkExpireEntry(b *testing.B) {
	const n = 100_000
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := New()
		for j := 0; j < n; j++ {
			m.ApplyCommand(uint64(j+1), 1, Command{Op: OpAcquire, Stamp: int64(j), Name: "exp/" + strconv.Itoa(j), Owner: "w", LeaseID: "lease-" + strconv.Itoa(j), TTL: int64(10_000 - j/100)}) // due together, ~1 ms apart per 100
		}
		runtime.GC() // the setup's garbage is not the entry's cost
		b.StartTimer()
		r := m.ApplyCommand(n+1, 1, Command{Op: OpTick, Stamp: 20e9})
		if r.Expired != MaxExpiriesPerEntry {
			b.Fatalf("expired %d, want %d", r.Expired, MaxExpiriesPerEntry)
		}
	}
}

// BenchmarkExpireEntryFullTombstones times one tick that settles
// MaxExpiriesPerEntry leases while MaxTombstones freed locks keep their
// index: every burial prunes the oldest tombstone.
func BenchmarkExpireEntryFullTombstones(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		m := New()
		index := uint64(0)
		for j := 0; j < MaxTombstones; j++ {
			name := "gone/" + strconv.Itoa(j)
			index++
			m.ApplyCommand(index, 1, Command{Op: OpAcquire, Name: name, Owner: "w", LeaseID: "L", TTL: 1000})
			index++
			m.ApplyCommand(index, 1, Command{Op: OpRelease, Name: name, LeaseID: "L"})
		}
		for j := 0; j < MaxExpiriesPerEntry; j++ {
			index++
			m.ApplyCommand(index, 1, Command{Op: OpAcquire, Name: "exp/" + strconv.Itoa(j), Owner: "w", LeaseID: "lease-" + strconv.Itoa(j), TTL: 10_000})
		}
		runtime.GC()
		b.StartTimer()
		r := m.ApplyCommand(index+1, 1, Command{Op: OpTick, Stamp: 20e9})
		if r.Expired != MaxExpiriesPerEntry || m.floor == 0 {
			b.Fatalf("expired %d, floor %d", r.Expired, m.floor)
		}
	}
}

// BenchmarkReleaseFullTombstones is one acquire and one release (a burial
// that prunes the oldest of MaxTombstones tombstones) per iteration.
func BenchmarkReleaseFullTombstones(b *testing.B) {
	m := New()
	index := uint64(0)
	for j := 0; j < MaxTombstones; j++ {
		name := "gone/" + strconv.Itoa(j)
		index++
		m.ApplyCommand(index, 1, Command{Op: OpAcquire, Name: name, Owner: "w", LeaseID: "L", TTL: 1000})
		index++
		m.ApplyCommand(index, 1, Command{Op: OpRelease, Name: name, LeaseID: "L"})
	}
	names := make([]string, b.N)
	for i := range names {
		names[i] = "new/" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		index++
		m.ApplyCommand(index, 1, Command{Op: OpAcquire, Name: names[i], Owner: "w", LeaseID: "L", TTL: 1000})
		index++
		m.ApplyCommand(index, 1, Command{Op: OpRelease, Name: names[i], LeaseID: "L"})
	}
}
