package raftnode

import (
	"strconv"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// What a state check costs a replica at 10k and 100k locks: the copy taken
// on the FSM goroutine (it holds up later entries) and the SHA-256 of the
// snapshot encoding, done off it.
func BenchmarkStateHash(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		m := fsm.New()
		for i := 0; i < n; i++ {
			m.ApplyCommand(uint64(i+1), 1, fsm.Command{Op: fsm.OpAcquire, Name: "held/" + strconv.Itoa(i), Owner: "worker-" + strconv.Itoa(i%50), LeaseID: "Xc2aJ0bq8b8QW1xN9r3T" + strconv.Itoa(i), TTL: 60000})
		}
		b.Run(strconv.Itoa(n)+"/copy", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				m.Snapshot()
			}
		})
		b.Run(strconv.Itoa(n)+"/hash", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := stateHash(m.Snapshot()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("crc32c-entry", func(b *testing.B) {
		data := (&fsm.Command{Op: fsm.OpAcquire, Name: "orders/89041", Owner: "worker-a", LeaseID: "Xc2aJ0bq8b8QW1xN9r3TgA", TTL: 10000}).Encode(nil)
		ext := encodeExtension(data, extension{})
		for i := 0; i < b.N; i++ {
			if _, _, err := decodeExtension(data, ext); err != nil {
				b.Fatal(err)
			}
		}
	})
}
