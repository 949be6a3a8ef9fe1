package main

import (
	"strings"
	"testing"

	gometrics "github.com/hashicorp/go-metrics/compat"
)

// recordSink records the keys it is given.
type recordSink struct{ keys []string }

func (s *recordSink) rec(key []string)                  { s.keys = append(s.keys, strings.Join(key, ".")) }
func (s *recordSink) SetGauge(k []string, _ float32)    { s.rec(k) }
func (s *recordSink) EmitKey(k []string, _ float32)     { s.rec(k) }
func (s *recordSink) IncrCounter(k []string, _ float32) { s.rec(k) }
func (s *recordSink) AddSample(k []string, _ float32)   { s.rec(k) }
func (s *recordSink) SetGaugeWithLabels(k []string, _ float32, _ []gometrics.Label) {
	s.rec(k)
}
func (s *recordSink) IncrCounterWithLabels(k []string, _ float32, _ []gometrics.Label) {
	s.rec(k)
}
func (s *recordSink) AddSampleWithLabels(k []string, _ float32, _ []gometrics.Label) {
	s.rec(k)
}

// TestRaftSinkDropsPerEntryKeys: the keys that fire per entry or per
// received RPC stop at raftSink; the dashboards' (raft.leader.dispatchLog,
// raft.thread.main.saturation) and the per-batch replication ones pass.
func TestRaftSinkDropsPerEntryKeys(t *testing.T) {
	rec := &recordSink{}
	s := raftSink{rec}
	key := func(k string) []string { return strings.Split("raftlock."+k, ".") }
	for _, k := range []string{"raft.apply", "raft.commitTime", "raft.net.rpcDecode", "raft.rpc.appendEntries",
		"raft.rpc.appendEntries.storeLogs", "raft.fsm.applyBatch", "raft.fsm.applyBatchNum", "raft.fsm.enqueue"} {
		s.AddSample(key(k), 1)
		s.AddSampleWithLabels(key(k), 1, nil)
		s.IncrCounter(key(k), 1)
		s.IncrCounterWithLabels(key(k), 1, nil)
		s.SetGauge(key(k), 1)
		s.SetGaugeWithLabels(key(k), 1, nil)
		s.EmitKey(key(k), 1)
	}
	if len(rec.keys) != 0 {
		t.Errorf("dropped keys reached the sink: %v", rec.keys)
	}
	keep := []string{"raft.leader.dispatchLog", "raft.thread.main.saturation", "raft.replication.appendEntries.rpc",
		"raft.rpc.requestVote", "raft.fsm.snapshot", "raft.state.leader", "raft.leader.lastContact"}
	for _, k := range keep {
		s.AddSampleWithLabels(key(k), 1, nil)
	}
	if len(rec.keys) != len(keep) {
		t.Errorf("kept keys %v, want all of %v", rec.keys, keep)
	}
}
