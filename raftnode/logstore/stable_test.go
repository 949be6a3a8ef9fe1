package logstore

import (
	"testing"
	"testing/synctest"

	"github.com/hashicorp/raft"
)

// A heartbeat answered on a transport goroutine after the node closed must
// neither reach the closed store nor come back with an error (raft panics
// when it cannot save a term): it waits.
func TestStableWriteAfterCloseWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := raft.NewInmemStore()
		s := &ClosingStable{StableStore: mem, late: make(chan struct{})}
		if err := s.SetUint64([]byte("CurrentTerm"), 4); err != nil {
			t.Fatal(err)
		}
		s.Close()
		returned := make(chan error, 1)
		go func() { returned <- s.SetUint64([]byte("CurrentTerm"), 5) }()
		synctest.Wait() // the write is blocked for good, or has returned
		select {
		case err := <-returned:
			t.Fatalf("a write after close returned (%v); raft would panic on an error", err)
		default:
		}
		if term, _ := mem.GetUint64([]byte("CurrentTerm")); term != 4 {
			t.Fatalf("term %d reached the store after close, want 4", term)
		}
		close(s.late) // let the goroutine end with the bubble
		<-returned
	})
}
