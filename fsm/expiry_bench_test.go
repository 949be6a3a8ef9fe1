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
