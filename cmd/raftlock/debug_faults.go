//go:build raftlock_faults

package main

import (
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/internal/faultclock"
	"github.com/raftlock/raftlock/raftnode"
)

// procClock is this process's one clock in a fault build: the node stamps
// entries and times ticks with it, the log is timestamped with its wall
// clock, and POST /debug/clock on --debug-addr moves it.
var procClock = faultclock.New()

var _ raftnode.Clock = procClock

// logTime timestamps log lines with the fault clock's wall time, so a node's
// log shows the wall jumps it was given.
var logTime hclog.TimeFunction = procClock.Wall

// nodeClock is the clock the node runs on: the fault clock, unless a test
// set its own.
func nodeClock(c raftnode.Clock) raftnode.Clock {
	if c != nil {
		return c
	}
	return procClock
}

// addDebugRoutes serves the clock fault endpoint next to pprof.
func addDebugRoutes(mux *http.ServeMux, logger hclog.Logger) {
	mux.Handle(faultclock.Path, faultclock.Handler(procClock, logger))
	logger.Warn("FAULT BUILD: clock faults accepted", "endpoint", faultclock.Path)
}

// faultBuild says which of the twins this build has; tests check the other is absent.
const faultBuild = true
