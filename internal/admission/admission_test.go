package admission

import (
	"fmt"
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

func TestGateNoLendingWhileAnotherTenantIsActive(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	g := NewGate(NewLimit(Config{Initial: 16, Min: 16, Max: 16, ActiveFor: time.Second, Now: c.now}), c.now)
	fill := func(tenant string) []*Ticket {
		var got []*Ticket
		for {
			tk, shed := g.Admit(tenant, false)
			if shed != nil {
				return got
			}
			got = append(got, tk)
		}
	}
	flood := fill("flood")
	if len(flood) != 16 {
		t.Fatalf("alone, the flood got %d slots, want the whole limit of 16", len(flood))
	}
	// One calm call, already finished: calm stays active for ActiveFor, so
	// the flood, as its calls end, refills only up to its share (8), though
	// 15 of 16 slots are then free.
	calm, shed := g.Admit("calm", false)
	if shed != nil {
		t.Fatalf("calm tenant shed on a node full of the flood: %v", shed)
	}
	calm.Done(false)
	for _, tk := range flood {
		tk.Done(false)
	}
	if got := len(fill("flood")); got != 8 {
		t.Fatalf("with calm active the flood refilled %d slots, want its share of 8", got)
	}
	if g.Check("flood", false) == nil || g.Check("calm", false) != nil {
		t.Fatal("Check disagrees with the shares: flood at its share, calm idle")
	}
	// Calm idle past ActiveFor: the flood has the whole limit again.
	c.advance(time.Second)
	if got := len(fill("flood")); got != 8 {
		t.Fatalf("after calm went idle the flood took %d more slots, want 8 (the limit)", got)
	}
	if g.Active() != 1 || g.InFlight() != 16 {
		t.Fatalf("active tenants %d, in flight %d; want 1 and 16", g.Active(), g.InFlight())
	}
}

// The property of Waiters: whatever flooding tenants do, a tenant that
// keeps fewer parked than its share is never refused, a tenant is refused
// only at or over its share, and other tenants' parked acquires are never
// touched by a refusal. Randomized over many interleavings, deterministic
// (fixed seed), for one and two flooding tenants.
func TestWaitersFloodCannotRefuseCalmWait(t *testing.T) {
	for _, floods := range []int{1, 2} {
		for _, budget := range []int{6, 16, 100} {
			r := rand.New(rand.NewPCG(uint64(budget), uint64(floods)))
			w := NewWaiters(budget)
			tenants := floods + 1
			calmMax := budget/tenants - 1 // the calm tenant stays below its share
			parked := map[string][]*Parked{}
			for step := range 20000 {
				name := "calm"
				if f := r.IntN(tenants + 2); f < tenants+1 && f > 0 { // floods ask most
					name = fmt.Sprintf("flood%d", f%floods)
				}
				mine := parked[name]
				leave := r.IntN(3) == 0 || name == "calm" && len(mine) >= calmMax
				if leave && len(mine) > 0 {
					i := r.IntN(len(mine))
					mine[i].Done()
					mine[i].Done() // a second Done changes nothing
					parked[name] = append(mine[:i], mine[i+1:]...)
				} else if !leave {
					before := map[string]int{}
					for n, ps := range parked {
						before[n] = len(ps)
					}
					p, shed := w.Park(name)
					switch {
					case shed != nil && name == "calm":
						t.Fatalf("budget %d, step %d: calm wait refused with %d parked: %v", budget, step, len(mine), shed)
					case shed != nil && shed.Parked < shed.Share:
						t.Fatalf("budget %d, step %d: %s refused below its share: %v", budget, step, name, shed)
					case shed == nil:
						parked[name] = append(mine, p)
					}
					for n, ps := range parked {
						if got := w.Of(n); got != len(ps) || n != name && got != before[n] {
							t.Fatalf("budget %d, step %d: %s counted %d, has %d parked", budget, step, n, got, len(ps))
						}
					}
				}
				total := 0
				for _, ps := range parked {
					total += len(ps)
				}
				if w.Total() != total || total >= 2*budget {
					t.Fatalf("budget %d, step %d: total %d counted, %d parked, want under %d", budget, step, w.Total(), total, 2*budget)
				}
			}
		}
	}
}

func TestWaitersShareFollowsTenants(t *testing.T) {
	w := NewWaiters(10)
	var flood []*Parked
	for {
		p, shed := w.Park("flood")
		if shed != nil {
			if shed.Share != 10 || shed.Parked != 10 {
				t.Fatalf("alone: %v, want refused at the whole budget of 10", shed)
			}
			break
		}
		flood = append(flood, p)
	}
	calm, shed := w.Park("calm")
	if shed != nil {
		t.Fatalf("calm wait refused with the flood at the budget: %v", shed)
	}
	// Two tenants parked: the flood's share is 5; it parks again only
	// when below it.
	for i, p := range flood[:5] {
		p.Done()
		if _, shed := w.Park("flood"); shed == nil {
			t.Fatalf("flood parked with %d parked, share 5", 10-i-1)
		}
	}
	flood[5].Done()
	if _, shed := w.Park("flood"); shed != nil {
		t.Fatalf("flood refused below its share: %v", shed)
	}
	calm.Done()
	if w.Of("calm") != 0 || w.Of("flood") != 5 || w.Total() != 5 {
		t.Fatalf("counts calm %d, flood %d, total %d; want 0, 5, 5", w.Of("calm"), w.Of("flood"), w.Total())
	}
}

// After a brownout has brought the limit down, the limit is back at the
// knee within 10 windows (1s at the default 100ms) of latency returning to
// the unloaded pace. Windows on a fake clock: the figure in real time is
// the bench's.
func TestLimitReturnsWithinASecondOfWindows(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	l := NewLimit(Config{Initial: 8, Min: 4, Max: 512, Now: c.now})
	healthy := pipeline{base: 2 * time.Millisecond, knee: 64}
	before := saturate(l, c, healthy, 400)
	if before < 64 {
		t.Fatalf("limit %d under overload of a knee of 64, want at least 64", before)
	}
	down := saturate(l, c, pipeline{base: 2 * time.Millisecond, knee: 4}, 100)
	if down > 16 {
		t.Fatalf("limit %d in a brownout with knee 4, want at most 16", down)
	}
	got := saturate(l, c, healthy, 10)
	if got < 64 {
		t.Fatalf("limit %d ten windows after the brownout ended (from %d; %d before it), want back at the knee of 64", got, down, before)
	}
}

// With more tenants than the limit (each with a share of 1), new work
// still stops at twice the limit; renews and releases still pass.
func TestGateBoundsManyTenants(t *testing.T) {
	g := fixedGate(8)
	admitted := 0
	for i := range 100 {
		if _, shed := g.Admit(fmt.Sprintf("t%d", i), false); shed == nil {
			admitted++
		}
	}
	if admitted != 16 || g.InFlight() != 16 {
		t.Fatalf("100 tenants on a limit of 8: %d admitted, %d in flight; want 16 (twice the limit)", admitted, g.InFlight())
	}
	if _, shed := g.Admit("t999", true); shed != nil {
		t.Fatalf("a release of a new tenant shed at the bound for new work: %v", shed)
	}
}

// A lone tenant's acquires and releases together may reach twice the
// limit; a newcomer is still admitted.
func TestGateReleasesDoNotShutOutANewcomer(t *testing.T) {
	g := fixedGate(8)
	for i := range 16 {
		if _, shed := g.Admit("flood", i >= 8); shed != nil {
			t.Fatalf("call %d of a lone tenant shed: %v", i, shed)
		}
	}
	if _, shed := g.Admit("calm", false); shed != nil {
		t.Fatalf("a newcomer shed with the flood's 8 acquires and 8 releases in flight: %v", shed)
	}
}
