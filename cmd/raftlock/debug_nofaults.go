//go:build !raftlock_faults

package main

import (
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/raftnode"
)

// In a release build there is no fault clock: the node reads the system
// clock and the debug listener serves pprof only (/debug/clock is 404).
// debug_faults.go is the raftlock_faults twin.

var logTime hclog.TimeFunction // nil: hclog reads time.Now

func nodeClock(c raftnode.Clock) raftnode.Clock { return c } // nil: raftnode's system clock

func addDebugRoutes(*http.ServeMux, hclog.Logger) {}

// faultBuild says which of the twins this build has; tests check the other is absent.
const faultBuild = false
