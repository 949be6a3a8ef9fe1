package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// Clock faults (--clock-faults) move node clocks through POST /debug/clock,
// which only a raftlock_faults build of raftlock serves.
const (
	ClockWallJump     = "clock-wall-jump"     // ±1 h on the wall clock of any node
	ClockLeaderSkew   = "clock-leader-skew"   // a new rate, within the bound, on the leader
	ClockFollowerJump = "clock-follower-jump" // the monotonic clock of a follower leaps forward at once
	ClockLeaderPause  = "clock-leader-pause"  // the leader stops 0.1-0.4 s: its monotonic clock leaps forward within its term
)

// ClockKinds lists the clock faults a --clock-faults run adds.
var ClockKinds = []string{ClockWallJump, ClockLeaderSkew, ClockFollowerJump, ClockLeaderPause}

// IsClock reports whether kind is a clock fault.
func IsClock(kind string) bool {
	for _, k := range ClockKinds {
		if k == kind {
			return true
		}
	}
	return false
}

// Drift is the client library's allowance: a lease is trusted until
// send + ttl × (1 − Drift) of the client's clock, so it is safe while the
// leader's clock runs at most 1/(1 − Drift) times as fast as the client's.
const Drift = 0.01

// Rates within the bound: every leader rate over every client rate is at
// most 1.005/0.995 = 1.01005 ≤ 1/(1 − Drift) = 1.0101.
const (
	LeaderRateMin, LeaderRateMax = 0.99, 1.005
	ClientRateMin, ClientRateMax = 0.995, 1.01
)

// ClockFault is what POST /debug/clock takes (internal/faultclock.Fault).
type ClockFault struct {
	Rate        float64 `json:"rate,omitempty"`
	JumpMonoMs  int64   `json:"jump_mono_ms,omitempty"`
	PauseMonoMs int64   `json:"pause_mono_ms,omitempty"`
	JumpWallMs  int64   `json:"jump_wall_ms,omitempty"`
}

// Clocks injects clock faults.
type Clocks struct {
	C   *procs.Cluster
	Rnd *rand.Rand
	// DebugURL is a node's --debug-addr base URL.
	DebugURL func(n *procs.Node) string
	// LeaderRate, when set, is the seeded twin beyond the bound: every
	// node's clock runs at this rate (1.2: 20 % fast), so whoever leads
	// expires leases early, and every skew fault keeps it.
	LeaderRate float64
}

// Set sends one fault to node n.
func (k *Clocks) Set(ctx context.Context, n *procs.Node, f ClockFault) error {
	b, _ := json.Marshal(f)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.DebugURL(n)+"/debug/clock", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("clock fault on %s: %w", n.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("clock fault on %s: status %d (is raftlock built with -tags raftlock_faults?)", n.ID, resp.StatusCode)
	}
	return nil
}

// Setup gives every node its starting rate: a random one within the bound,
// or LeaderRate for the seeded twin.
func (k *Clocks) Setup(ctx context.Context) (string, error) {
	var desc string
	for _, n := range k.C.Nodes {
		r := k.rate()
		if err := k.Set(ctx, n, ClockFault{Rate: r}); err != nil {
			return desc, err
		}
		desc += fmt.Sprintf(" %s×%.4f", n.ID, r)
	}
	return "clock rates" + desc, nil
}

func (k *Clocks) rate() float64 {
	if k.LeaderRate > 0 {
		return k.LeaderRate
	}
	return LeaderRateMin + k.Rnd.Float64()*(LeaderRateMax-LeaderRateMin)
}

// ClientRate picks a workload client's clock rate within the bound.
func ClientRate(rnd *rand.Rand) float64 {
	return ClientRateMin + rnd.Float64()*(ClientRateMax-ClientRateMin)
}

// Inject runs one clock fault on the node it picks and returns its record.
func (k *Clocks) Inject(ctx context.Context, kind string) Fault {
	f := Fault{Kind: kind, Start: history.Now()}
	err := func() error {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		leader, err := k.C.WaitReady(lctx)
		if err != nil {
			return err
		}
		var followers []*procs.Node
		for _, n := range k.C.Nodes {
			if n != leader && n.Running() {
				followers = append(followers, n)
			}
		}
		f.Start = history.Now()
		switch kind {
		case ClockWallJump:
			n := k.C.Nodes[k.Rnd.Intn(len(k.C.Nodes))]
			if !n.Running() {
				n = leader
			}
			jump := int64(time.Hour / time.Millisecond)
			if k.Rnd.Intn(2) == 0 {
				jump = -jump
			}
			f.Target, f.Detail = n.ID, fmt.Sprintf("wall clock %+dh", jump/int64(time.Hour/time.Millisecond))
			return k.Set(lctx, n, ClockFault{JumpWallMs: jump})
		case ClockLeaderSkew:
			r := k.rate()
			f.Target, f.Detail = leader.ID, fmt.Sprintf("clock rate %.4f", r)
			return k.Set(lctx, leader, ClockFault{Rate: r})
		case ClockFollowerJump:
			if len(followers) == 0 {
				return fmt.Errorf("no follower")
			}
			n := followers[k.Rnd.Intn(len(followers))]
			d := time.Duration(1+k.Rnd.Int63n(3600)) * time.Second
			f.Target, f.Detail = n.ID, fmt.Sprintf("monotonic clock leaps forward %v at once", d)
			return k.Set(lctx, n, ClockFault{JumpMonoMs: d.Milliseconds()})
		case ClockLeaderPause:
			// A real pause: the process stops, and on resume its clock has
			// leapt by the time that passed. Shorter than the election
			// timeout, so it keeps leading and its next stamp takes the leap
			// within its term. (Freezing only the clock, pause_mono_ms, while
			// the node keeps serving is beyond the bound: grants during the
			// freeze carry stale stamps, and the catch-up ends them early.)
			d := time.Duration(100+k.Rnd.Intn(301)) * time.Millisecond
			f.Target, f.Detail = leader.ID, fmt.Sprintf("SIGSTOP %v: the monotonic clock leaps forward by it within the term", d)
			if err := leader.Pause(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			return leader.Resume()
		}
		return fmt.Errorf("unknown clock fault %q", kind)
	}()
	if err != nil {
		f.Err = err.Error()
	}
	f.End = history.Now()
	return f
}

// WithClock interleaves the clock faults with kinds, so that a short run
// has both.
func WithClock(kinds []string) []string {
	var out []string
	for i := 0; i < max(len(kinds), len(ClockKinds)); i++ {
		if i < len(kinds) {
			out = append(out, kinds[i])
		}
		if i < len(ClockKinds) {
			out = append(out, ClockKinds[i])
		}
	}
	return out
}
