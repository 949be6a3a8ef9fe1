package fsm

import (
	"io"
	"strconv"
	"testing"
)

func BenchmarkEncode(b *testing.B) {
	c := Command{Op: OpAcquire, Stamp: 1 << 40, Name: "orders/89041", Owner: "worker-a", LeaseID: "Xc2aJ0bq8b8QW1xN9r3TgA", TTL: 10000}
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = c.Encode(buf[:0])
	}
}

func BenchmarkDecode(b *testing.B) {
	c := Command{Op: OpAcquire, Stamp: 1 << 40, Name: "orders/89041", Owner: "worker-a", LeaseID: "Xc2aJ0bq8b8QW1xN9r3TgA", TTL: 10000}
	data := c.Encode(nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeCommand(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyAcquireRelease applies an acquire and a release of one of
// 10,000 locks per iteration, with 100,000 other leases held.
func BenchmarkApplyAcquireRelease(b *testing.B) {
	m := machineWith(100_000)
	names := make([]string, 10_000)
	for i := range names {
		names[i] = "bench/" + strconv.Itoa(i)
	}
	index := uint64(1_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := names[i%len(names)]
		index++
		m.ApplyCommand(index, 1, Command{Op: OpAcquire, Stamp: int64(index), Name: name, LeaseID: "lease-0123456789ab", TTL: 10000})
		index++
		m.ApplyCommand(index, 1, Command{Op: OpRelease, Stamp: int64(index), Name: name, LeaseID: "lease-0123456789ab"})
	}
}

// BenchmarkSnapshot1M writes a snapshot of one million held locks.
func BenchmarkSnapshot1M(b *testing.B) {
	m := machineWith(1_000_000)
	b.ResetTimer()
	var size int64
	for i := 0; i < b.N; i++ {
		n, err := m.Snapshot().WriteTo(io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		size = n
	}
	b.ReportMetric(float64(size)/(1<<20), "MiB")
}

// machineWith returns a machine holding n leases of a minute.
func machineWith(n int) *Machine {
	m := New()
	for i := 0; i < n; i++ {
		m.ApplyCommand(uint64(i+1), 1, Command{Op: OpAcquire, Name: "held/" + strconv.Itoa(i), Owner: "worker", LeaseID: "lease-" + strconv.Itoa(i) + "-0123456789", TTL: 60000})
	}
	return m
}

// BenchmarkSessionRenew applies one renew of a session holding 1 or
// MaxLeasesPerSession leases: what every replica pays per keepalive.
func BenchmarkSessionRenew(b *testing.B) {
	for _, leases := range []int{1, MaxLeasesPerSession} {
		b.Run(strconv.Itoa(leases), func(b *testing.B) {
			m, index := sessionWith(leases)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				index++
				if r := m.ApplyCommand(index, 1, Command{Version: commandVersion5, Op: OpSessionRenew, StampTerm: 1, SessionID: "S"}); r.Status != StatusOK {
					b.Fatal(r.Status)
				}
			}
		})
	}
}

// BenchmarkSessionRead reads a session of MaxLeasesPerSession leases with
// its leases (GET /v1/sessions/{id}).
func BenchmarkSessionRead(b *testing.B) {
	m, _ := sessionWith(MaxLeasesPerSession)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if s, ok := m.Session("S"); !ok || len(s.Leases) != MaxLeasesPerSession {
			b.Fatal(len(s.Leases))
		}
	}
}

// sessionWith is a machine with session "S" holding n locks, and the last
// index applied.
func sessionWith(n int) (*Machine, uint64) {
	m := New()
	m.ApplyCommand(1, 1, Command{Version: commandVersion5, Op: OpSessionCreate, StampTerm: 1, SessionID: "S", Owner: "o", TTL: 60_000})
	for i := 0; i < n; i++ {
		m.ApplyCommand(uint64(i+2), 1, Command{Version: commandVersion5, Op: OpAcquire, StampTerm: 1, Name: "s/" + strconv.Itoa(i), Owner: "o", LeaseID: "L" + strconv.Itoa(i), SessionID: "S"})
	}
	return m, uint64(n + 1)
}
