package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind (watchdogs,
// renewals in flight, waiting acquires).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
