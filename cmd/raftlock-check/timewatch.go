package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/faults"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/leaderwatch"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/cmd/raftlock-check/workload"
)

// serverTick is raftnode.Config.TickInterval's default, which raftlock
// serve does not change: while deadlines run, the leader stamps the FSM
// clock at least this often.
const serverTick = 250 * time.Millisecond

// startWatch samples GET /v1/cluster on every node (not through a seeded
// relay) for the whole run: the time bounds add every outage it sees.
func (r *runner) startWatch() {
	var urls []string
	for _, n := range r.c.Nodes {
		urls = append(urls, n.URL())
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.watch = &leaderwatch.Watcher{Endpoints: urls}
	done := make(chan struct{})
	go func() { defer close(done); r.watch.Run(ctx) }()
	r.stopWatch = func() { cancel(); <-done }
}

// endWatch stops the watcher; observations answered later prove nothing.
func (r *runner) endWatch() {
	if r.stopWatch != nil {
		r.watchEnd = history.Now()
		r.stopWatch()
		r.stopWatch = nil
	}
}

// finishProbes takes each time-probe lock once the clients have stopped
// (a 15 s wait: every abandoned lease and session ends within 8 s) and
// releases it, so that the nodes' final lists do not change while (d)
// reads them. A lock still refused after the wait is a violation of (l).
func (r *runner) finishProbes(ctx context.Context, cl *workload.Client) {
	for i, name := range append(r.cfg.ttlLocks(), r.cfg.sessLocks()...) {
		lease := fmt.Sprintf("final-t-%02d-%012d", i, r.cfg.seed)
		var got history.Entry
		for try := 0; try < 5 && ctx.Err() == nil; try++ {
			got = cl.Call(history.Entry{Op: history.Acquire, Name: name, Lease: lease, TTLMs: 60000, WaitMs: 15000}, "/v1/locks/acquire",
				map[string]any{"name": name, "owner": "final", "ttl_ms": 60000, "lease_id": lease, "wait_ms": 15000})
			if got.Outcome != history.Unknown {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		if got.Outcome != history.OK {
			r.probeErrs = append(r.probeErrs, model.Violation{Property: "l", Detail: fmt.Sprintf("lock %q could not be taken within 15 s of the workload's end (every abandoned lease and session should have ended): %s %s", name, got.Outcome, got.Err)})
			continue
		}
		cl.Call(history.Entry{Op: history.Release, Name: name, Lease: lease}, "/v1/locks/release", map[string]any{"name": name, "lease_id": lease})
	}
}

// timeProps judges (l), (m) and (n) (model.TimeBounds).
func (r *runner) timeProps(ops []history.Op) []property {
	p := model.DefaultTimeParams
	p.Tick, p.WatchEnd = serverTick, r.watchEnd
	if r.cfg.clockFaults {
		// Node clocks may run as slow as LeaderRateMin: the FSM clock's
		// durations last up to 1/LeaderRateMin as long in real time.
		slowest := faults.LeaderRateMin
		if r.cfg.leaderRate > 0 {
			slowest = min(slowest, r.cfg.leaderRate)
		}
		p.Rate = 1 / slowest
	}
	var outages, windows []model.Window
	if r.watch != nil {
		ticks := r.watch.Timeline()
		if b, err := json.Marshal(ticks); err == nil {
			os.WriteFile(filepath.Join(r.dir, "leader.json"), b, 0o644)
		}
		for _, o := range leaderwatch.Outages(ticks) {
			outages = append(outages, model.Window{From: o.From, To: o.To, Change: o.Change})
		}
	}
	sort.Slice(outages, func(i, j int) bool { return outages[i].From < outages[j].From })
	for _, f := range r.faults {
		windows = append(windows, model.Window{From: f.Start, To: f.End})
	}
	t := model.TimeBounds(ops, outages, windows, r.restores(), p)
	r.rep.timeRep = t
	lease := property{id: "l", name: "leases end by TTL + leaderless time + slack", violations: append(append([]model.Violation(nil), r.probeErrs...), t.Lease...)}
	lease.note = fmt.Sprintf("%d TTL leases bounded, %d witnessed after their bound; %d outages of leadership seen; allowances: tick %v, %v per outage, slack %v",
		t.LeasesBounded, t.LeasesWitnessed, t.Outages, p.Tick, p.PerOutage, p.Slack)
	if t.TightestSet {
		lease.note += fmt.Sprintf("; closest a lease seen held came to its bound: %v (%s)", t.Tightest.Round(time.Millisecond), t.TightestLease)
	}
	if t.LeasesWitnessed == 0 && len(lease.violations) == 0 {
		lease.notChecked = true
	}
	wake := property{id: "m", name: "parked acquires granted within " + p.Wake.String() + " of a release", violations: t.Wake}
	wake.note = fmt.Sprintf("%d releases judged with a waiter parked past the bound, no fault near", t.WakeJudged)
	if d := t.WakeLatency; len(d) > 0 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		wake.note += fmt.Sprintf("; release -> first waiter's grant (quiet): median %v, worst %v (%d)", d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond), len(d))
	}
	if t.WakeJudged == 0 {
		wake.notChecked = true
	}
	sess := property{id: "n", name: "a session's leases end with the session", violations: t.Session}
	sess.note = fmt.Sprintf("%d sessions bounded, %d witnessed after their bound (a read of one of their locks)", t.SessionsBounded, t.SessionsWitnessed)
	if t.SessionsWitnessed == 0 && len(sess.violations) == 0 {
		sess.notChecked = true
	}
	return []property{lease, wake, sess}
}
