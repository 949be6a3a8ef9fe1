package main

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/faults"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// setupClocks (--clock-faults) gives each node a clock rate within the
// bound (or the seeded twin's rate beyond it) and each workload client one.
func (r *runner) setupClocks() error {
	rnd := rand.New(rand.NewSource(r.cfg.seed + 7))
	r.clocks = &faults.Clocks{C: r.c, Rnd: rnd, LeaderRate: r.cfg.leaderRate,
		DebugURL: func(n *procs.Node) string { return "http://" + n.DebugAddr }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := r.clocks.Setup(ctx)
	if err != nil {
		return err
	}
	r.clientRates = map[int]float64{}
	for id := 1; id <= r.cfg.clients; id++ {
		r.clientRates[id] = faults.ClientRate(rnd)
		desc += fmt.Sprintf(" c%d×%.4f", id, r.clientRates[id])
	}
	if r.cfg.leaderRate > 0 {
		desc += fmt.Sprintf(" (SEEDED: node clocks ×%v, beyond the bound)", r.cfg.leaderRate)
	}
	r.logf("%s; (a) judged with drift %v", desc, r.cfg.drift)
	return nil
}

// inject runs one fault: a clock fault through the debug listener, or one
// of the process faults. A node restarted by a process fault comes back on
// a fresh clock, so every node is given a rate again.
func (r *runner) inject(ctx context.Context, inj *faults.Injector, kind string) faults.Fault {
	if faults.IsClock(kind) {
		return r.clocks.Inject(ctx, kind)
	}
	f := inj.Inject(ctx, kind)
	if f.Restore != nil && f.Restore.Answered != model.MaxTime {
		r.readAfterRestore()
	}
	if r.clocks != nil && (kind == faults.LeaderKill || kind == faults.FollowerRestart) {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := r.c.WaitReady(sctx) // the restarted node's debug listener is up
		var desc string
		if err == nil {
			desc, err = r.clocks.Setup(sctx)
		}
		if err != nil {
			r.logf("clock rates after %s: %v", kind, err)
		} else {
			r.logf("after %s: %s", kind, desc)
		}
		cancel()
	}
	return f
}
