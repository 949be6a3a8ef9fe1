package main

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/testenv"
)

// buildFaults builds the checker (build) and returns raftlock built with its
// fault clock (-tags raftlock_faults).
func buildFaults(t *testing.T) string {
	t.Helper()
	build(t)
	return testenv.Binary(t, "raftlock_faults")
}

// The twins differ only in the node clock rate. Faults: leader transfers
// and the clock faults (wall jumps of ±1 h, leader rate skew, follower
// monotonic leaps, leader pauses); client clocks skewed within the bound.
func clockRun(t *testing.T, extra ...string) (int, string) {
	if testing.Short() {
		t.Skip("end-to-end run of about 30 s")
	}
	bin := buildFaults(t)
	return runChecker(t, bins.checker, nil, append([]string{"--raftlock-bin", bin,
		"--duration", "25s", "--seed", "4243", "--calm-min", "300ms", "--calm-max", "800ms",
		"--faults", "leader-transfer", "--clock-faults"}, extra...)...)
}

// Within the bound every property holds.
func TestClockWithinBoundHolds(t *testing.T) {
	code, report := clockRun(t)
	if code != 0 {
		t.Fatalf("clock faults within the bound: exit %d, want 0\n%s", code, report)
	}
	for _, k := range []string{"clock rates", "clock-wall-jump", "clock-leader-skew", "clock-follower-jump", "clock-leader-pause"} {
		if !strings.Contains(report, k) {
			t.Errorf("the report does not show %q", k)
		}
	}
	if t.Failed() {
		t.Fatalf("clock faults missing from the run\n%s", report)
	}
}

// The seeded twin beyond the bound: every node's clock 20 % fast (so the
// leader's is) ends leases early, and the checker must report two holders
// at once (a).
func TestClockBeyondBoundIsSeen(t *testing.T) {
	code, report := clockRun(t, "--clock-leader-rate", "1.2")
	if code != 1 || !strings.Contains(verdict(report, "a"), "FAIL") {
		t.Fatalf("a 20%%-fast leader clock: exit %d, want 1 with (a) failing\n%s", code, report)
	}
}
