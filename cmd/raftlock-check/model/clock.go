package model

import (
	"math"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// ClientClocks rewrites each op's TTL into real time for a run whose client
// clocks run at rates[client] (relative to CLOCK_MONOTONIC, by which the
// history is timed), taking off the fraction cut: ttl × (1 − cut) / rate,
// rounded down to the millisecond (lenient by under 1 ms).
//
// A client trusts a lease for ttl × (1 − drift) of its own clock, which is
// ttl × (1 − drift) / rate of real time: property (a) takes ops rewritten
// with cut 0 and its usual drift. A server promises no expiry before
// ttl × (1 − drift) / rate of real time after the send, as long as the
// leader's clock runs at most 1/(1 − drift) times as fast as the client's:
// (b) and (e), which treat ttl as the earliest real-time expiry, take ops
// rewritten with cut = drift. Clients without a rate keep rate 1.
func ClientClocks(ops []history.Op, rates map[int]float64, cut float64) []history.Op {
	out := make([]history.Op, len(ops))
	for i, o := range ops {
		r := rates[o.Client]
		if r <= 0 {
			r = 1
		}
		if o.TTLMs > 0 {
			o.TTLMs = int64(math.Floor(float64(o.TTLMs) * (1 - cut) / r))
		}
		out[i] = o
	}
	return out
}
