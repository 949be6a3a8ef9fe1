package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/leaderwatch"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
)

// window is one fault, from its start mark to its end mark, in
// CLOCK_MONOTONIC nanoseconds.
type window struct {
	Kind, Target string
	Start, End   int64
	Open         bool // no end mark: it lasted to the end of the run
}

// readMarks reads the marks file; a missing file means no faults. offset is
// wall-clock minus monotonic; end closes windows that have no end mark.
func readMarks(path string, offset, end int64) ([]window, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMarks(f, offset, end)
}

func parseMarks(r io.Reader, offset, end int64) ([]window, error) {
	var out []window
	open := map[string]int{} // kind+target -> index of its open window
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 3 || len(f) > 4 || (f[1] != "start" && f[1] != "end") {
			return nil, fmt.Errorf("marks line %d: want \"<unix ns> start|end <kind> [target]\", got %q", n, sc.Text())
		}
		wall, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("marks line %d: bad time %q", n, f[0])
		}
		kind, target := f[2], ""
		if len(f) == 4 {
			target = f[3]
		}
		key, t := kind+"\x00"+target, wall-offset
		if f[1] == "start" {
			if _, dup := open[key]; !dup {
				open[key] = len(out)
				out = append(out, window{Kind: kind, Target: target, Start: t, End: end, Open: true})
			}
			continue
		}
		if i, ok := open[key]; ok {
			out[i].End, out[i].Open = max(t, out[i].Start), false
			delete(open, key)
		}
	}
	return out, sc.Err()
}

// opStats counts lock operations (acquire, renew, release, read).
type opStats struct {
	attempted, succeeded, unknown, failed int
}

func (s *opStats) add(o history.Op) {
	s.attempted++
	switch o.Outcome {
	case history.Unknown:
		s.unknown++
	case history.Fail:
		s.failed++
	default: // a definite answer from the service: 200, 409 held, 409 not_holder
		s.succeeded++
	}
}

func (s opStats) failedAll() int { return s.unknown + s.failed }

func (s opStats) share() string {
	if s.attempted == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(s.failedAll())/float64(s.attempted))
}

func isLockOp(o history.Op) bool {
	switch o.Kind {
	case history.Acquire, history.Renew, history.Update, history.Release, history.Read:
		return true
	}
	return false
}

// windowResult is what one fault window did to the clients and the leader.
type windowResult struct {
	window
	ops       opStats
	wasLeader bool          // the target led when the fault started
	newLeader string        // "" when no new leader was confirmed in the window
	toLeader  time.Duration // start of the fault -> first confirmed leader of a higher term
}

type extSummary struct {
	cfg        extConfig
	dir        string
	start, end int64
	ticks      []leaderwatch.Tick
	ops        []history.Op
	regLog     []history.Access
	windows    []window

	all, calm map[string]*opStats // by op kind; "" is the total
	results   []windowResult
	regs      model.RegisterReport
	props     []property
	leader    leaderwatch.Stats
}

func (s *extSummary) check() {
	s.all, s.calm = map[string]*opStats{"": {}}, map[string]*opStats{"": {}}
	for _, w := range s.windows {
		s.results = append(s.results, windowResult{window: w})
	}
	for _, o := range s.ops {
		if !isLockOp(o) {
			continue
		}
		inFault := false
		for i := range s.results {
			if r := &s.results[i]; o.Call >= r.Start && o.Call <= r.End {
				r.ops.add(o)
				inFault = true
			}
		}
		for _, m := range []map[string]*opStats{s.all, s.calm} {
			if m == nil {
				continue
			}
			if m[o.Kind] == nil {
				m[o.Kind] = &opStats{}
			}
		}
		s.all[""].add(o)
		s.all[o.Kind].add(o)
		if !inFault {
			s.calm[""].add(o)
			s.calm[o.Kind].add(o)
		}
	}
	for i := range s.results {
		r := &s.results[i]
		r.wasLeader = r.Target != "" && leaderwatch.LeaderAt(s.ticks, r.Start) == r.Target
		if d, l, ok := leaderwatch.NewLeaderAfter(s.ticks, r.Start); ok && r.Start+int64(d) <= r.End {
			r.newLeader, r.toLeader = l, d
		}
	}
	s.leader = leaderwatch.Analyse(s.ticks)
	s.regs = model.RegisterSafety(s.regLog, s.ops)
	s.props = []property{
		{id: "a", name: "no two valid holders of a lock at once", violations: only(model.MutualExclusion(s.ops, s.cfg.drift), "a")},
		{id: "b", name: "tokens of a lock increase; retries keep them", violations: model.Tokens(s.ops)},
		{id: "c", name: "no lower token, no lost write", violations: s.regs.Violations},
		{id: "f", name: "lock indexes never go backwards (reads)", violations: model.IndexOrder(s.ops)},
	}
	if s.cfg.mix > 0 {
		s.props = append(s.props, holdProps(s.ops, s.ops, s.ops, s.cfg.drift, nil, "")...)
	}
}

func (s *extSummary) violations() int {
	n := 0
	for _, p := range s.props {
		n += len(p.violations)
	}
	return n
}

func (s *extSummary) failed() bool { return s.violations() > 0 || s.all[""].succeeded == 0 }

// medianWorst returns the median (the mean of the middle two for an even
// count) and the largest of ds.
func medianWorst(ds []time.Duration) (time.Duration, time.Duration) {
	d := append([]time.Duration(nil), ds...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	med := d[len(d)/2]
	if len(d)%2 == 0 {
		med = (d[len(d)/2-1] + d[len(d)/2]) / 2
	}
	return med, d[len(d)-1]
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

func (s *extSummary) print(w io.Writer) {
	at := func(t int64) string { return fmt.Sprintf("%6.2fs", time.Duration(t-s.start).Seconds()) }
	fmt.Fprintf(w, "==== raftlock-check workload summary (seed %d, %v, %d clients, %d endpoints)\n",
		s.cfg.seed, time.Duration(s.end-s.start).Round(100*time.Millisecond), s.cfg.clients, len(s.cfg.endpoints))
	t := s.all[""]
	fmt.Fprintf(w, "lock operations: attempted %d, succeeded %d, failed %d (%s: %d unknown outcome, %d refused)\n",
		t.attempted, t.succeeded, t.failedAll(), t.share(), t.unknown, t.failed)
	for _, k := range []string{history.Acquire, history.Renew, history.Update, history.Release, history.Read} {
		if c := s.all[k]; c != nil {
			fmt.Fprintf(w, "  %-8s attempted %6d, succeeded %6d, failed %5d (%s)\n", k, c.attempted, c.succeeded, c.failedAll(), c.share())
		}
	}
	fmt.Fprintf(w, "registers: fenced %d writes accepted, %d refused (stale token); unfenced %d writes, %d lost\n",
		s.regs.FencedAccepted, s.regs.FencedRejected, s.regs.UnfencedWrites, s.regs.UnfencedLost)
	printBatched(w, s.ops)

	if len(s.results) == 0 {
		fmt.Fprintf(w, "faults: none marked\n")
	} else {
		fmt.Fprintf(w, "faults (%d), lock operations sent during each:\n", len(s.results))
	}
	type agg struct {
		n      int
		ops    opStats
		toLead []time.Duration
		led    int
	}
	byKind := map[string]*agg{}
	var kinds []string
	for _, r := range s.results {
		role := "follower"
		if r.wasLeader {
			role = "leader"
		}
		if r.Target == "" {
			role = ""
		}
		nl := "no leader change"
		if r.newLeader != "" {
			nl = fmt.Sprintf("new leader %s after %s", r.newLeader, ms(r.toLeader))
		}
		end := ""
		if r.Open {
			end = " (no end mark)"
		}
		fmt.Fprintf(w, "  %s %-14s %-3s %-8s %6.2fs%s  ops %4d, failed %4d (%6s; %d unknown, %d refused)  %s\n", at(r.Start), r.Kind, r.Target, role,
			time.Duration(r.End-r.Start).Seconds(), end, r.ops.attempted, r.ops.failedAll(), r.ops.share(), r.ops.unknown, r.ops.failed, nl)
		a := byKind[r.Kind]
		if a == nil {
			a = &agg{}
			byKind[r.Kind] = a
			kinds = append(kinds, r.Kind)
		}
		a.n++
		a.ops.attempted += r.ops.attempted
		a.ops.succeeded += r.ops.succeeded
		a.ops.unknown += r.ops.unknown
		a.ops.failed += r.ops.failed
		if r.wasLeader {
			a.led++
		}
		if r.newLeader != "" {
			a.toLead = append(a.toLead, r.toLeader)
		}
	}
	for _, k := range kinds {
		a := byKind[k]
		line := fmt.Sprintf("  %-14s x%d: ops %d, failed %d (%s; %d unknown, %d refused)", k, a.n, a.ops.attempted, a.ops.failedAll(), a.ops.share(), a.ops.unknown, a.ops.failed)
		if len(a.toLead) > 0 {
			med, worst := medianWorst(a.toLead)
			line += fmt.Sprintf("; time to new leader median %s, worst %s (%d of %d)", ms(med), ms(worst), len(a.toLead), a.n)
		}
		fmt.Fprintln(w, line)
	}
	if len(s.results) > 0 {
		c := s.calm[""]
		fmt.Fprintf(w, "  %-14s    ops %d, failed %d (%s)\n", "outside faults", c.attempted, c.failedAll(), c.share())
	}

	ls := s.leader
	if ls.LongestLeaderless > 0 {
		fmt.Fprintf(w, "leader: longest time with no leader %s (from %s), %s leaderless in all; %d leader changes",
			ms(ls.LongestLeaderless), strings.TrimSpace(at(ls.LongestFrom)), ms(ls.Leaderless), len(ls.Changes))
	} else {
		fmt.Fprintf(w, "leader: never without a leader; %d leader changes", len(ls.Changes))
	}
	if len(ls.Changes) > 0 {
		var gaps []time.Duration
		var parts []string
		for _, c := range ls.Changes {
			gaps = append(gaps, c.Gap)
			parts = append(parts, fmt.Sprintf("%s→%s %s", c.From, c.To, ms(c.Gap)))
		}
		med, worst := medianWorst(gaps)
		fmt.Fprintf(w, ", gap median %s, worst %s\n  changes: %s", ms(med), ms(worst), strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "\n(leader sampled every %v on each endpoint; a leader counts once its own endpoint names itself.\n"+
		" Each operation goes to a random endpoint with no failover: \"refused\" ones hit a node that was down.)\n", s.cfg.interval)

	fmt.Fprintf(w, "properties:\n")
	for _, p := range s.props {
		verdict := "PASS"
		switch {
		case len(p.violations) > 0:
			verdict = fmt.Sprintf("FAIL (%d)", len(p.violations))
		case p.notChecked:
			verdict = "NOT CHECKED (" + p.note + ")"
		}
		fmt.Fprintf(w, "  (%s) %-17s %-48s %s\n", p.id, model.PropertyName(p.id), p.name, verdict)
		for i, v := range p.violations {
			if i == 10 {
				fmt.Fprintf(w, "      … %d more\n", len(p.violations)-10)
				break
			}
			fmt.Fprintf(w, "      %s\n", v.Detail)
		}
	}
	if t.succeeded == 0 {
		fmt.Fprintf(w, "LIVENESS: no lock operation succeeded\n")
	}
	fmt.Fprintf(w, "violations: %d\n", s.violations())
	if s.failed() {
		fmt.Fprintf(w, "RESULT: FAIL — journals, register log and leader timeline in %s\n", s.dir)
	} else {
		fmt.Fprintf(w, "RESULT: PASS\n")
	}
}
