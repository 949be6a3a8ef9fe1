package main

import (
	"testing"
	"time"
)

func TestParseServerPids(t *testing.T) {
	got, err := parseServerPids("n1=10, n2=20,30")
	if err != nil {
		t.Fatal(err)
	}
	want := []serverProc{{"n1", 10}, {"n2", 20}, {"30", 30}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"n1=x", "n1=0", "-3", "n1=1,n1=2"} {
		if _, err := parseServerPids(bad); err == nil {
			t.Errorf("parseServerPids(%q): no error", bad)
		}
	}
}

func TestCPUReportRoles(t *testing.T) {
	m := &cpuMeter{procs: []serverProc{{"n1", 1}, {"n2", 2}, {"n3", 3}}}
	before := cpuSample{cpu: []time.Duration{time.Second, 0, 0}, commit: 100, leader: "n2"}
	after := cpuSample{cpu: []time.Duration{1200 * time.Millisecond, 400 * time.Millisecond, 100 * time.Millisecond}, commit: 300, leader: "n2"}
	r := m.report(before, after, 100, 200)
	if r.TotalMs != 700 || r.UsPerCycle != 7000 || r.Entries != 200 || r.Requests != 200 {
		t.Errorf("totals %+v", r)
	}
	n1, n2 := r.Processes[0], r.Processes[1]
	if n2.Role != "leader" || n2.UsPerRequest != 2000 || n2.UsPerCycle != 4000 {
		t.Errorf("leader %+v", n2)
	}
	if n1.Role != "follower" || n1.UsPerEntry != 1000 || n1.CPUMs != 200 {
		t.Errorf("follower %+v", n1)
	}
	if r.Rounds != 0 || r.EntriesPerRound != 0 {
		t.Errorf("rounds %d (%.1f per round) without a rounds count read", r.Rounds, r.EntriesPerRound)
	}
	before.rounds, before.roundsOK = 1000, true
	after.rounds, after.roundsOK = 1040, true
	if r := m.report(before, after, 100, 200); r.Rounds != 40 || r.EntriesPerRound != 5 {
		t.Errorf("rounds %d, %.1f entries per round; want 40 and 5", r.Rounds, r.EntriesPerRound)
	}
	changed := after
	changed.leader = "n3" // another leader's count: no rounds of this run
	if r := m.report(before, changed, 100, 200); r.Rounds != 0 {
		t.Errorf("rounds %d across a change of leader", r.Rounds)
	}
	// Names that are no node's id (etcd members, a bare pid): no roles.
	m.procs = []serverProc{{"e1", 1}, {"e2", 2}, {"e3", 3}}
	for _, p := range m.report(before, after, 100, 200).Processes {
		if p.Role != "" || p.UsPerRequest != 0 || p.UsPerEntry != 0 {
			t.Errorf("process %+v has a role", p)
		}
	}
}

func TestMetricValue(t *testing.T) {
	text := []byte("# HELP x\nraftlock_raft_leader_dispatchLog{quantile=\"0.5\"} 0.19\n" +
		"raftlock_raft_leader_dispatchLog_sum 12.5\nraftlock_raft_leader_dispatchLog_count 3431\n" +
		"raftlock_raft_leader_dispatchLog_count_other 7\n")
	if v, ok := metricValue(text, roundsMetric); !ok || v != 3431 {
		t.Errorf("metricValue = %d, %v; want 3431", v, ok)
	}
	if v, ok := metricValue([]byte("raftlock_raft_leader_dispatchLog_count 1.2e+06\n"), roundsMetric); !ok || v != 1200000 {
		t.Errorf("metricValue of an exponent = %d, %v; want 1200000", v, ok)
	}
	for _, bad := range []string{"", "raftlock_raft_leader_dispatchLog_count x\n", "raftlock_raft_leader_dispatchLog_count_other 7\n"} {
		if v, ok := metricValue([]byte(bad), roundsMetric); ok {
			t.Errorf("metricValue(%q) = %d, true; want not found", bad, v)
		}
	}
}
