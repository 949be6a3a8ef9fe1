package raftnode

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// neverAnswered is a future hashicorp/raft left in its apply queue when it
// shut down: nobody ever answers it.
type neverAnswered struct{ block chan struct{} }

func (f neverAnswered) Error() error { <-f.block; return nil }

// The leader loop's own entries are waited for only until the node stops:
// Close waits for the leader loop, which must not hang on a future raft
// will never answer.
func TestOwnEntryWaitEndsWhenTheNodeStops(t *testing.T) {
	n := &Node{stop: make(chan struct{})}
	f := neverAnswered{block: make(chan struct{})}
	defer close(f.block) // lets the waiting goroutine end with the test
	errc := make(chan error, 1)
	go func() { errc <- n.awaitUnlessStopped(f) }()
	select {
	case err := <-errc:
		t.Fatalf("returned %v before the node stopped", err)
	default:
	}
	close(n.stop)
	select {
	case err := <-errc:
		if !errors.Is(err, raft.ErrRaftShutdown) {
			t.Fatalf("err %v, want raft.ErrRaftShutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10 s after the node stopped")
	}
}
