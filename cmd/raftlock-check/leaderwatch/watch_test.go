package leaderwatch

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func TestJudgeNeedsTheLeadersOwnFreshWord(t *testing.T) {
	fresh := 200 * time.Millisecond
	now := 1000 * ms
	followersOnly := []Sample{
		{Time: now, OK: true, Node: "n2", Leader: "n1", Term: 3},
		{Time: now, OK: true, Node: "n3", Leader: "n1", Term: 3},
	}
	if got := Judge(now, followersOnly, fresh); got.Leader != "" {
		t.Fatalf("followers naming a silent leader confirmed %q", got.Leader)
	}
	stale := append(followersOnly, Sample{Time: now - 300*ms, OK: true, Node: "n1", Leader: "n1", Term: 3})
	if got := Judge(now, stale, fresh); got.Leader != "" {
		t.Fatalf("a stale self-report confirmed %q", got.Leader)
	}
	two := []Sample{
		{Time: now, OK: true, Node: "n1", Leader: "n1", Term: 3}, // deposed, not yet told
		{Time: now, OK: true, Node: "n2", Leader: "n2", Term: 4},
	}
	if got := Judge(now, two, fresh); got.Leader != "n2" || got.Term != 4 {
		t.Fatalf("two claimants: got %+v, want n2 of term 4", got)
	}
}

func TestAnalyseAndNewLeaderAfter(t *testing.T) {
	var ticks []Tick
	add := func(from, to int64, leader string, term uint64) {
		for t := from; t < to; t += 50 {
			ticks = append(ticks, Tick{Time: t * ms, Leader: leader, Term: term})
		}
	}
	add(0, 200, "", 0)       // before the first leader: not counted
	add(200, 1000, "n1", 2)  // n1 leads
	add(1000, 2500, "", 0)   // killed at 1000: 1.5 s without a leader
	add(2500, 3000, "n2", 3) // n2 elected
	add(3000, 3500, "n3", 4) // transfer: no gap
	add(3500, 3600, "", 0)   // a short gap
	add(3600, 4000, "n3", 5) // n3 again, a new term
	st := Analyse(ticks)
	if len(st.Changes) != 3 {
		t.Fatalf("changes %+v, want 3", st.Changes)
	}
	if c := st.Changes[0]; c.From != "n1" || c.To != "n2" || c.Gap != 1500*time.Millisecond {
		t.Errorf("first change %+v", c)
	}
	if c := st.Changes[1]; c.Gap != 0 {
		t.Errorf("transfer gap %v, want 0", c.Gap)
	}
	if st.LongestLeaderless != 1500*time.Millisecond || st.LongestFrom != 1000*ms {
		t.Errorf("longest leaderless %v from %d", st.LongestLeaderless, st.LongestFrom)
	}
	if st.Leaderless != 1600*time.Millisecond {
		t.Errorf("leaderless in all %v, want 1.6s", st.Leaderless)
	}
	if d, l, ok := NewLeaderAfter(ticks, 980*ms); !ok || l != "n2" || d != 1520*time.Millisecond {
		t.Errorf("after the kill: %v %q %v", d, l, ok)
	}
	if _, _, ok := NewLeaderAfter(ticks, 3900*ms); ok {
		t.Errorf("a new leader found after the last change")
	}
	if l := LeaderAt(ticks, 1200*ms); l != "n1" {
		t.Errorf("leader at 1.2s: %q, want the last confirmed n1", l)
	}
}

func TestOutagesStartWhenTheLeaderWasLastKnownAlive(t *testing.T) {
	tick := func(at int64, leader string, term uint64) Tick {
		if leader == "" {
			return Tick{Time: at * ms}
		}
		return Tick{Time: at * ms, Leader: leader, Term: term, Alive: (at - 30) * ms}
	}
	ticks := []Tick{
		tick(0, "", 0), // before the first leader: not an outage
		tick(50, "n1", 2), tick(100, "n1", 2),
		tick(150, "", 0), tick(200, "", 0), // killed
		tick(250, "n2", 3), tick(300, "n2", 3),
		tick(350, "n3", 4),                                       // a transfer: no leaderless tick
		tick(400, "n3", 4), tick(450, "", 0), tick(500, "n3", 4), // unconfirmed a while, same term
		tick(550, "", 0), // leaderless at the end
	}
	want := []Outage{{70 * ms, 250 * ms, true}, {270 * ms, 350 * ms, true}, {370 * ms, 500 * ms, false}, {470 * ms, 550 * ms, true}}
	got := Outages(ticks)
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outage %d: got %v, want %v", i, got[i], want[i])
		}
	}
}
