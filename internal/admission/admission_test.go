package admission

import (
	"math/rand/v2"
	"testing"
	"time"
)

// fakeClock is a clock moved by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// pipeline is a fake commit path: calls take base up to knee calls in
// flight, and beyond that latency grows in proportion (a saturated queue).
type pipeline struct {
	base time.Duration
	knee int
}

func (p pipeline) latency(inflight int) time.Duration {
	if inflight <= p.knee {
		return p.base
	}
	return p.base * time.Duration(inflight) / time.Duration(p.knee)
}

// saturate runs windows in which clients always keep the limit full (an
// overload), and returns the limit after them.
func saturate(l *Limit, c *fakeClock, p pipeline, windows int) int {
	for range windows {
		in := l.Current()
		for range l.cfg.MinSamples {
			l.Observe(p.latency(in), in)
		}
		c.advance(l.cfg.Window)
		in = l.Current()
		l.Observe(p.latency(in), in) // closes the window
	}
	return l.Current()
}

func newTestLimit(c *fakeClock, initial int) *Limit {
	return NewLimit(Config{Initial: initial, Min: 2, Max: 512, Now: c.now})
}

func TestLimitFindsTheKneeAndFollowsLatency(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := newTestLimit(c, 8)
	healthy := pipeline{base: 2 * time.Millisecond, knee: 32}

	// From below: the limit grows until latency passes Tolerance (2x) of
	// the unloaded pace, i.e. to about 2*knee, and stays around there.
	got := saturate(l, c, healthy, 400)
	if got < 32 || got > 96 {
		t.Fatalf("limit after overload on a knee of 32 = %d, want it near 64 (32..96)", got)
	}
	base, recent := l.Latencies()
	if base != healthy.base || recent > 3*healthy.base {
		t.Fatalf("baseline %v, recent %v: want baseline %v and recent within 3x", base, recent, healthy.base)
	}

	// Brownout: the same load now takes 8x longer past 4 in flight. The
	// limit must come down to what the slow pipeline serves in tolerance.
	slow := pipeline{base: 2 * time.Millisecond, knee: 4}
	got = saturate(l, c, slow, 100)
	if got > 16 {
		t.Fatalf("limit in a brownout with knee 4 = %d, want at most 16", got)
	}

	// Recovery: latency falls back, the limit climbs back.
	got = saturate(l, c, healthy, 400)
	if got < 32 {
		t.Fatalf("limit after recovery = %d, want back to at least 32", got)
	}
}

func TestLimitFromAboveComesDown(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := newTestLimit(c, 512)
	// The very first window already runs far past the knee, so its average
	// becomes the baseline; only after a calm window can the controller
	// tell. Give it one (few calls in flight).
	for range 10 {
		l.Observe(time.Millisecond, 1)
	}
	c.advance(time.Second)
	l.Observe(time.Millisecond, 1)
	if got := saturate(l, c, pipeline{base: time.Millisecond, knee: 16}, 200); got > 48 {
		t.Fatalf("limit = %d after overload on a knee of 16, want at most 48", got)
	}
}

func TestLimitDoesNotGrowWhenClientsBoundTheLoad(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := newTestLimit(c, 16)
	for range 200 {
		for range 10 {
			l.Observe(time.Millisecond, 3) // fast, but only 3 of 16 ever used
		}
		c.advance(l.cfg.Window)
	}
	if got := l.Current(); got != 16 {
		t.Fatalf("limit = %d after light load, want it left at 16", got)
	}
}

func TestLimitNeedsAWindowAndSamples(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := newTestLimit(c, 64)
	for range 100 {
		l.Observe(time.Second, 64) // slow, but all within one window
	}
	if got := l.Current(); got != 64 {
		t.Fatalf("limit moved to %d within one window", got)
	}
	c.advance(time.Hour)
	l.Observe(time.Second, 64) // closes the window: its latency is the first baseline
	if base, _ := l.Latencies(); base != time.Second {
		t.Fatalf("baseline %v after the first window, want 1s", base)
	}
}

// fixedGate is a gate whose limit is pinned at n.
func fixedGate(n int) *Gate {
	return NewGate(NewLimit(Config{Initial: n, Min: n, Max: n}), nil)
}

func TestGateFloodCannotTakeCalmShare(t *testing.T) {
	g := fixedGate(16)
	var flood []*Ticket
	for {
		tk, shed := g.Admit("flood", false)
		if shed != nil {
			break
		}
		flood = append(flood, tk)
	}
	if len(flood) != 16 {
		t.Fatalf("alone, the flood got %d slots, want the whole limit of 16", len(flood))
	}
	// The node is full of the flood; the calm tenant still gets its share
	// (16/2 = 8), and the flood is what is shed.
	var calm []*Ticket
	for range 8 {
		tk, shed := g.Admit("calm", false)
		if shed != nil {
			t.Fatalf("calm tenant shed with %d in flight: %v", len(calm), shed)
		}
		calm = append(calm, tk)
	}
	if _, shed := g.Admit("calm", false); shed == nil {
		t.Fatal("calm tenant admitted past its share on a full node")
	}
	if _, shed := g.Admit("flood", false); shed == nil {
		t.Fatal("flood admitted past the limit while over its share")
	}
	// As flood calls finish, the flood may not refill beyond what calm leaves.
	for _, tk := range flood[:10] {
		tk.Done(false)
	}
	n := 0
	for {
		tk, shed := g.Admit("flood", false)
		if shed != nil {
			break
		}
		flood = append(flood, tk)
		n++
	}
	if in := g.InFlight(); in != 16 || n != 2 {
		t.Fatalf("after 10 flood calls finished the flood took %d more, %d in flight; want 2 and 16", n, in)
	}
	for _, tk := range calm {
		tk.Done(false)
	}
	if g.Tenants() != 1 {
		t.Fatalf("%d tenants in flight, want 1 (calm left)", g.Tenants())
	}
}

func TestGatePriorityHeadroom(t *testing.T) {
	g := fixedGate(8)
	for range 8 {
		if _, shed := g.Admit("a", false); shed != nil {
			t.Fatal(shed)
		}
	}
	if _, shed := g.Admit("a", false); shed == nil {
		t.Fatal("acquire admitted past the limit")
	}
	for i := range 8 {
		if _, shed := g.Admit("a", true); shed != nil {
			t.Fatalf("renew %d shed below twice the limit: %v", i, shed)
		}
	}
	if _, shed := g.Admit("a", true); shed == nil {
		t.Fatal("renew admitted past twice the limit")
	}
}

// A randomized run: a flood keeps asking, a calm tenant with at most 4
// calls in flight is never shed, and in-flight calls stay under 2L.
func TestGateCalmNeverShedUnderFlood(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []int{8, 16, 64, 256} {
		g := fixedGate(limit)
		var flood, calm []*Ticket
		for step := range 20000 {
			switch r.IntN(4) {
			case 0, 1: // the flood asks twice as often as anything else
				if tk, shed := g.Admit("flood", r.IntN(4) == 0); shed == nil {
					flood = append(flood, tk)
				}
			case 2:
				if len(calm) < 4 {
					tk, shed := g.Admit("calm", false)
					if shed != nil {
						t.Fatalf("limit %d, step %d: calm tenant shed: %v", limit, step, shed)
					}
					calm = append(calm, tk)
				} else {
					i := r.IntN(len(calm))
					calm[i].Done(true)
					calm = append(calm[:i], calm[i+1:]...)
				}
			case 3:
				if len(flood) > 0 {
					i := r.IntN(len(flood))
					flood[i].Done(true)
					flood = append(flood[:i], flood[i+1:]...)
				}
			}
			if in := g.InFlight(); in > 2*limit || in != len(flood)+len(calm) {
				t.Fatalf("limit %d, step %d: %d in flight (flood %d, calm %d)", limit, step, in, len(flood), len(calm))
			}
		}
	}
}

func TestLabelerBoundsCardinality(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := NewLabeler(2, time.Minute, c.now)
	seen := map[string]bool{}
	for i := range 1000 {
		seen[l.Label(string(rune('a'+i%26)))] = true
	}
	if len(seen) != 3 || !seen[OtherLabel] {
		t.Fatalf("labels %v, want 2 tenants and %q", seen, OtherLabel)
	}
	// Next period, the busiest two of the last one get the labels.
	for range 50 {
		l.Label("busy1")
		l.Label("busy2")
	}
	c.advance(time.Minute)
	if got := l.Label("busy1"); got != "busy1" {
		t.Fatalf("busiest tenant labelled %q", got)
	}
	if got := l.Label("busy2"); got != "busy2" {
		t.Fatalf("second busiest tenant labelled %q", got)
	}
	if got := l.Label("a"); got != OtherLabel {
		t.Fatalf("a quiet tenant labelled %q after re-ranking", got)
	}
}
