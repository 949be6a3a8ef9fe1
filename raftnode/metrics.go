package raftnode

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftlock/raftlock/fsm"
)

// nodeMetrics counts what the state machine did on this node and reads the
// node's Raft state when scraped. Counters are per replica: every node counts
// every grant it applies, so sum them over one node, not the cluster.
type nodeMetrics struct {
	commands *prometheus.CounterVec // by op and outcome
	// byOutcome holds commands' children resolved once, so the FSM goroutine
	// does no label hashing per entry.
	byOutcome     [fsm.OpForceRelease + 1][fsm.StatusInvalid + 1]prometheus.Counter
	expiries      prometheus.Counter
	leaderChanges prometheus.Counter
	gauges        []prometheus.Collector
}

func newNodeMetrics(n *Node) *nodeMetrics {
	m := &nodeMetrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftlock_commands_applied_total",
			Help: "Lock commands applied to this node's state machine, by op (acquire, renew, release, tick) and outcome (ok, held, not_holder, invalid).",
		}, []string{"op", "outcome"}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftlock_lease_expiries_total",
			Help: "Leases that ran out of TTL, as applied on this node.",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "raftlock_leadership_changes_total",
			Help: "Times this node gained or lost leadership.",
		}),
	}
	for op := fsm.OpAcquire; op <= fsm.OpForceRelease; op++ {
		for st := fsm.StatusOK; st <= fsm.StatusInvalid; st++ {
			m.byOutcome[op][st] = m.commands.WithLabelValues(op.String(), st.String())
		}
	}
	gauge := func(name, help string, f func() float64) {
		m.gauges = append(m.gauges, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("raftlock_raft_term", "Current Raft term.", func() float64 { return float64(n.raft.CurrentTerm()) })
	gauge("raftlock_raft_commit_index", "Raft commit index known to this node.", func() float64 { return float64(n.raft.CommitIndex()) })
	gauge("raftlock_raft_applied_index", "Last Raft index applied on this node.", func() float64 { return float64(n.raft.AppliedIndex()) })
	gauge("raftlock_raft_last_index", "Last Raft index in this node's log.", func() float64 { return float64(n.raft.LastIndex()) })
	gauge("raftlock_is_leader", "1 while this node leads.", func() float64 {
		if n.raft.State() == raft.Leader {
			return 1
		}
		return 0
	})
	gauge("raftlock_leases_held", "Leases currently held, as of this node's applied state.", func() float64 { return float64(n.machine.HeldCount()) })
	gauge("raftlock_state_diverged", "1 once this node's state hash differed from the leader's at a state check; it then serves nothing until an operator acts.", func() float64 {
		if _, bad := n.Diverged(); bad {
			return 1
		}
		return 0
	})
	gauge("raftlock_waiters", "Acquires parked on this node waiting for a lock.", func() float64 { return float64(n.waiters.size()) })
	// Counters of sendahead.go; zero when it is off.
	aheadCount := func(name, help string, f func(*sendAhead) uint64) {
		m.gauges = append(m.gauges, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if n.ahead == nil {
				return 0
			}
			return float64(f(n.ahead))
		}))
	}
	aheadCount("raftlock_raft_send_ahead_total", "Batches this node, as leader, sent to a follower before its own log write had finished (one per follower).",
		func(a *sendAhead) uint64 { return a.sent.Load() })
	aheadCount("raftlock_raft_send_ahead_used_total", "Send-ahead answers raft's replication took for the same entries of its own AppendEntries.",
		func(a *sendAhead) uint64 { return a.used.Load() })
	aheadCount("raftlock_raft_send_ahead_refused_total", "Send-ahead answers raft's replication could not use (refused, failed, or older than LeaderLeaseTimeout); its own AppendEntries carried the entries.",
		func(a *sendAhead) uint64 { return a.refused.Load() })
	return m
}

func (m *nodeMetrics) applied(op fsm.Op, r fsm.Result) {
	if int(op) < len(m.byOutcome) && int(r.Status) < len(m.byOutcome[op]) && m.byOutcome[op][r.Status] != nil {
		m.byOutcome[op][r.Status].Inc()
	} else {
		m.commands.WithLabelValues(op.String(), r.Status.String()).Inc()
	}
	if r.Expired > 0 {
		m.expiries.Add(float64(r.Expired))
	}
}

// DropRaftMetric reports whether a hashicorp/raft go-metrics key (key[0] is
// the service name, then "raft", ...) is one that fires once per log entry
// or once per RPC a follower receives and that raftlock's own metrics or
// another raft metric cover: raft.apply (raftlock_commands_applied_total),
// raft.commitTime (the HTTP request histogram; raft.leader.dispatchLog and
// raft.replication.appendEntries.rpc time its parts per batch), the
// transport's per-RPC raft.net.* timings, a follower's
// raft.rpc.appendEntries{,.storeLogs,.processLogs} (the leader's
// raft.replication.appendEntries.rpc holds them) and the FSM's per-batch
// raft.fsm.{apply,applyBatch,applyBatchNum,enqueue} (raftlock's apply
// counters). Each costs a summary update (a quantile stream insert under a
// lock) on every write; a sink that drops them by comparing the key's
// parts, with no go-metrics filter (which joins every key into a string
// first), keeps that off the write path. The dashboards and alert rules in
// monitoring/ read none of them.
func DropRaftMetric(key []string) bool {
	if len(key) < 3 || key[1] != "raft" {
		return false
	}
	switch key[2] {
	case "apply", "commitTime", "net":
		return true
	case "rpc":
		return len(key) > 3 && key[3] == "appendEntries"
	case "fsm":
		if len(key) > 3 {
			switch key[3] {
			case "apply", "applyBatch", "applyBatchNum", "enqueue":
				return true
			}
		}
	}
	return false
}

// Collectors returns the node's Prometheus metrics for registration.
func (n *Node) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{n.metrics.commands, n.metrics.expiries, n.metrics.leaderChanges}, n.metrics.gauges...)
}
