package main

import (
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/leaderwatch"
)

func TestParseMarks(t *testing.T) {
	const offset = 1_000
	in := `# comment
2000 start kill n1
2500 start pause n2
3000 end kill n1
4000 start kill n1
`
	ws, err := parseMarks(strings.NewReader(in), offset, 9_000)
	if err != nil {
		t.Fatal(err)
	}
	want := []window{
		{Kind: "kill", Target: "n1", Start: 1000, End: 2000},
		{Kind: "pause", Target: "n2", Start: 1500, End: 9000, Open: true},
		{Kind: "kill", Target: "n1", Start: 3000, End: 9000, Open: true},
	}
	if len(ws) != len(want) {
		t.Fatalf("got %+v", ws)
	}
	for i := range want {
		if ws[i] != want[i] {
			t.Errorf("window %d: got %+v, want %+v", i, ws[i], want[i])
		}
	}
	if _, err := parseMarks(strings.NewReader("soon start kill n1\n"), 0, 0); err == nil {
		t.Error("a bad time was accepted")
	}
}

func TestSummaryCountsFaultWindows(t *testing.T) {
	sec := int64(time.Second)
	op := func(call int64, kind, out string) history.Op {
		return history.Op{Kind: kind, Call: call, Return: call + 1, Outcome: out}
	}
	s := &extSummary{
		cfg: extConfig{clients: 1, endpoints: []string{"x"}, interval: 50 * time.Millisecond},
		ops: []history.Op{
			op(1*sec, history.Acquire, history.OK),
			op(3*sec, history.Acquire, history.Unknown),
			op(3*sec, history.Read, history.Held),
			op(4*sec, history.Renew, history.Fail),
			{ID: "w1", Kind: history.FWrite, Name: "x", Token: 5, Call: 4 * sec, Return: 4*sec + 1, Outcome: history.OK}, // not a lock op
		},
		regLog:  []history.Access{{Fenced: true, Name: "x", Write: true, OpID: "w1", Token: 5, Accepted: true, Version: 1}},
		windows: []window{{Kind: "kill", Target: "n1", Start: 2 * sec, End: 5 * sec}},
		ticks: []leaderwatch.Tick{
			{Time: 1 * sec, Leader: "n1", Term: 2}, {Time: 2 * sec}, {Time: 3500 * int64(time.Millisecond), Leader: "n2", Term: 3},
		},
	}
	s.check()
	r := s.results[0]
	if r.ops.attempted != 3 || r.ops.failedAll() != 2 || !r.wasLeader || r.newLeader != "n2" || r.toLeader != 1500*time.Millisecond {
		t.Fatalf("window %+v", r)
	}
	if c := s.calm[""]; c.attempted != 1 || c.failedAll() != 0 {
		t.Fatalf("outside faults %+v", c)
	}
	var b strings.Builder
	s.print(&b)
	for _, want := range []string{"attempted 4, succeeded 2, failed 2", "time to new leader median 1.5s, worst 1.5s (1 of 1)", "violations: 0", "RESULT: PASS"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	// An acknowledged fenced write the register never saw is a violation.
	s.regLog = nil
	s.check()
	if !s.failed() || s.violations() != 1 {
		t.Fatalf("lost acknowledged write: failed %v, %d violations", s.failed(), s.violations())
	}
}
