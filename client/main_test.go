package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind (watchdogs,
// renewals in flight, waiting acquires).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// hashicorp/raft's NetworkTransport.Close does not close the
		// connections it accepted, so the real-cluster tests leave these
		// readers behind; they are not the client's.
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*NetworkTransport).handleConn"),
		// The in-process nodes' batch call workers end a few seconds after
		// their last call (httpapi/batch.go).
		goleak.IgnoreAnyFunction("github.com/raftlock/raftlock/httpapi.(*Server).callWorker"),
	)
}
