package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// TestBenchCountsRaftRounds: against real nodes, whose /metrics carry
// hashicorp/raft's, bench reports how many log writes the leader made over
// its window and how many entries each carried, beside the CPU per node.
func TestBenchCountsRaftRounds(t *testing.T) {
	t.Parallel()
	c := testenv.StartProcs(t, procs.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	var eps, pids []string
	for _, n := range c.Nodes {
		eps = append(eps, n.URL())
		pids = append(pids, fmt.Sprintf("%s=%d", n.ID, n.Pid()))
	}
	r := runCLI(t, nil, "bench", "--endpoints", strings.Join(eps, ","), "--duration", "1s", "--workers", "8",
		"--via", "client", "--progress", "0", "--json", "--server-pids", strings.Join(pids, ","))
	if r.code != exitOK {
		t.Fatalf("exit %d, want 0; stderr %q", r.code, r.stderr)
	}
	var rep benchReport
	decode(t, r.stdout, &rep)
	cpu := rep.CPU
	if cpu == nil || cpu.Entries < uint64(2*rep.Cycles) {
		t.Fatalf("cpu report %+v for %d cycles", cpu, rep.Cycles)
	}
	// Every entry is written in some round and a round writes at least one;
	// the leader's own entries (ticks) are in both counts.
	if cpu.Rounds == 0 || cpu.Rounds > cpu.Entries || cpu.EntriesPerRound < 1 {
		t.Errorf("rounds %d, %.2f entries per round, for %d entries", cpu.Rounds, cpu.EntriesPerRound, cpu.Entries)
	}
	leaders := 0
	for _, p := range cpu.Processes {
		if p.Role == "leader" {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("processes %+v: want one leader", cpu.Processes)
	}
}
