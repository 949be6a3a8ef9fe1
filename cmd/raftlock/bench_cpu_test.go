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
	// Names that are no node's id (etcd members, a bare pid): no roles.
	m.procs = []serverProc{{"e1", 1}, {"e2", 2}, {"e3", 3}}
	for _, p := range m.report(before, after, 100, 200).Processes {
		if p.Role != "" || p.UsPerRequest != 0 || p.UsPerEntry != 0 {
			t.Errorf("process %+v has a role", p)
		}
	}
}
