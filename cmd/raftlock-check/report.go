package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/raftlock/raftlock/cmd/raftlock-check/faults"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
)

// property is one line of the verdict.
type property struct {
	id, name   string
	violations []model.Violation
	note       string
	unknown    bool // the check could not decide (porcupine timed out)
	notChecked bool // the check could not run; does not fail the run
}

type report struct {
	ops        []history.Op
	props      []property
	regs       model.RegisterReport
	killToAcq  []time.Duration
	lin        []model.LinResult
	visualised []string
	checkTime  time.Duration
	timeRep    model.TimeReport
}

func (r *runner) failed() bool {
	for _, p := range r.rep.props {
		if len(p.violations) > 0 || p.unknown {
			return true
		}
	}
	return false
}

// check merges the journals and checks every property.
func (r *runner) check() error {
	t0 := time.Now()
	entries, err := history.ReadDir(filepath.Join(r.dir, "journal"))
	if err != nil {
		return err
	}
	ops := history.Pair(entries)
	rep := &r.rep
	rep.ops = ops
	log := r.reg.Log()
	if b, err := json.Marshal(log); err == nil {
		os.WriteFile(filepath.Join(r.dir, "registers.json"), b, 0o644)
	}
	rep.regs = model.Registers(log, ops)
	// Client clocks (--clock-faults): (a) by each client's own clock, (b)
	// and (e) by the earliest expiry the bound promises (model.ClientClocks).
	opsA, opsE := ops, ops
	if r.clientRates != nil {
		opsA, opsE = model.ClientClocks(ops, r.clientRates, 0), model.ClientClocks(ops, r.clientRates, r.cfg.drift)
	}
	dviol := append(append([]model.Violation(nil), r.finalErrs...), model.FinalState(r.nodes, r.epilogue, ops)...)
	// A backup restore (--faults restore) rolls the state back: (a), (b),
	// (e), (h), (i) and (j) judge each epoch between restores apart
	// (model.Epochs); (c), (d), (f) and (g) hold across restores as they
	// are, and (k) checks what a restore still promises.
	restores := r.restores()
	ep, err := splitEpochs(ops, opsA, opsE, restores)
	if err != nil {
		return err
	}
	rep.props = []property{
		{id: "a", name: "no two valid holders of a lock at once", violations: ep.each(func(_, a, _ []history.Op) []model.Violation { return only(model.MutualExclusion(a, r.cfg.drift), "a") })},
		{id: "b", name: "a lock's tokens increase; retries keep them", violations: ep.each(func(_, _, e []history.Op) []model.Violation { return model.Tokens(e) })},
		{id: "c", name: "fenced one safe, unfenced one loses writes", violations: rep.regs.Violations},
		{id: "d", name: "acknowledged ops in every node's final state", violations: dviol},
	}
	rep.lin = ep.linearizable(r.cfg.linTimeout)
	e := property{id: "e", name: "of each lock (porcupine, lease-lock model)"}
	m := model.Model()
	var notes []string
	for _, l := range rep.lin {
		notes = append(notes, fmt.Sprintf("%s: %d ops %s", l.Name, l.Ops, l.Result))
		switch l.Result {
		case porcupine.Illegal:
			e.violations = append(e.violations, model.Violation{Property: "e", Detail: fmt.Sprintf("history of lock %q is not linearizable", l.Name)})
		case porcupine.Unknown:
			e.unknown = true
		}
		if l.Result != porcupine.Ok {
			p := filepath.Join(r.dir, "porcupine-"+strings.ReplaceAll(l.Name, "/", "_")+".html")
			if err := porcupine.VisualizePath(m, l.Info, p); err == nil {
				rep.visualised = append(rep.visualised, p)
			}
		}
	}
	e.note = strings.Join(notes, "; ")
	rep.props = append(rep.props, e,
		property{id: "f", name: "lock indexes never go backwards (reads)", violations: model.IndexOrder(ops)},
		stateVerdict(r.stateCk))
	rep.props = append(rep.props, ep.holdProps(r.cfg.drift, r.holdErrs, r.holdNote)...)
	rep.props = append(rep.props, restoreVerdict(ops, restores, ep))
	rep.props = append(rep.props, r.timeProps(ops)...)
	for _, f := range r.faults {
		if f.Kind != faults.LeaderKill || f.Err != "" {
			continue
		}
		best := int64(-1)
		for _, o := range ops {
			if o.Kind == history.Acquire && o.Outcome == history.OK && o.Call >= f.Start && (best < 0 || o.Return < best) {
				best = o.Return
			}
		}
		if best > 0 {
			rep.killToAcq = append(rep.killToAcq, time.Duration(best-f.Start))
		}
	}
	rep.checkTime = time.Since(t0)
	return nil
}

func (rep *report) print(r *runner) {
	w := r.out
	fmt.Fprintf(w, "\n==== raftlock-check report (seed %d, duration %v)\n", r.cfg.seed, r.cfg.duration)
	kinds := []string{history.Acquire, history.Renew, history.Update, history.Release, history.Read, history.FRead, history.FWrite, history.URead, history.UWrite,
		history.SessCreate, history.SessRenew, history.SessClose, history.SemAcquire, history.SemRenew, history.SemRelease, history.SemRead}
	counts := map[string]map[string]int{}
	for _, o := range rep.ops {
		if counts[o.Kind] == nil {
			counts[o.Kind] = map[string]int{}
		}
		counts[o.Kind][o.Outcome]++
	}
	fmt.Fprintf(w, "operations by outcome (%d in all):\n", len(rep.ops))
	for _, k := range kinds {
		var parts []string
		var outs []string
		for o := range counts[k] {
			outs = append(outs, o)
		}
		sort.Strings(outs)
		total := 0
		for _, o := range outs {
			parts = append(parts, fmt.Sprintf("%s %d", o, counts[k][o]))
			total += counts[k][o]
		}
		if total == 0 && k != history.Acquire && k != history.Renew && k != history.Release {
			continue // e.g. a run without the mixed cycles
		}
		fmt.Fprintf(w, "  %-14s %6d  %s\n", k, total, strings.Join(parts, ", "))
	}
	byKind := map[string]int{}
	for _, f := range r.faults {
		byKind[f.Kind]++
	}
	fmt.Fprintf(w, "faults injected (%d): %v\n", len(r.faults), byKind)
	for _, f := range r.faults {
		fmt.Fprintf(w, "  %s\n", f)
	}
	for _, s := range r.notReady {
		fmt.Fprintf(w, "  LIVENESS: %s\n", s)
	}
	if d := rep.killToAcq; len(d) > 0 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		med := d[len(d)/2]
		if len(d)%2 == 0 {
			med = (d[len(d)/2-1] + d[len(d)/2]) / 2
		}
		fmt.Fprintf(w, "leader kill -> next successful acquire: median %v, worst %v (%d kills)\n",
			med.Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond), len(d))
	} else {
		fmt.Fprintf(w, "leader kill -> next successful acquire: no leader kills measured\n")
	}
	fmt.Fprintf(w, "registers: fenced %d writes accepted, %d refused (stale token), %d second writes under one token refused; unfenced %d writes, %d lost\n",
		rep.regs.FencedAccepted, rep.regs.FencedRejected, rep.regs.FencedRepeats, rep.regs.UnfencedWrites, rep.regs.UnfencedLost)
	waits, late := 0, 0
	for _, o := range rep.ops {
		if (o.Kind == history.Acquire || o.Kind == history.SemAcquire) && o.WaitMs > 0 && o.Client != 0 { // not the closing ops
			waits++
			if o.Outcome == history.OK && o.Return-o.Call >= o.WaitMs*int64(time.Millisecond) {
				late++
			}
		}
	}
	fmt.Fprintf(w, "boundary: %d waiting acquires, %d granted as their wait ran out\n", waits, late)
	printBatched(w, rep.ops)
	blocking, woken, valued := 0, 0, 0
	for _, o := range rep.ops {
		if o.Kind != history.Read || (o.Outcome != history.OK && o.Outcome != history.Free) {
			continue
		}
		if o.Value != "" {
			valued++
		}
		if o.WaitMs > 0 {
			blocking++
			if o.Index > o.AskIndex {
				woken++
			}
		}
	}
	printHoldFigures(w, rep.ops, r.cfg.drift, r.faults)
	fmt.Fprintf(w, "reads: %d answered blocking reads (%d answered a higher index than asked, %d ran out their wait), %d reads showed a value\n",
		blocking, woken, blocking-woken, valued)
	fmt.Fprintf(w, "checking took %v\nproperties:\n", rep.checkTime.Round(time.Millisecond))
	for _, p := range rep.props {
		verdict := "PASS"
		switch {
		case len(p.violations) > 0:
			verdict = fmt.Sprintf("FAIL (%d)", len(p.violations))
		case p.unknown:
			verdict = "UNDECIDED (porcupine timed out)"
		case p.notChecked:
			verdict = "NOT CHECKED"
		}
		fmt.Fprintf(w, "  (%s) %-17s %-48s %s\n", p.id, model.PropertyName(p.id), p.name, verdict)
		if p.note != "" {
			fmt.Fprintf(w, "      %s\n", p.note)
		}
		for i, v := range p.violations {
			if i == 10 {
				fmt.Fprintf(w, "      … %d more\n", len(p.violations)-10)
				break
			}
			fmt.Fprintf(w, "      %s\n", v.Detail)
		}
	}
	for _, v := range rep.visualised {
		fmt.Fprintf(w, "porcupine visualisation: %s\n", v)
	}
	if r.failed() {
		fmt.Fprintf(w, "RESULT: FAIL — journal, register log and node logs kept in %s\n", r.dir)
	} else {
		fmt.Fprintf(w, "RESULT: PASS\n")
	}
}

// printBatched prints how many calls went in a POST /v1/batch, by kind and
// outcome, when any did: the line both the checker's report and the
// workload's summary print.
func printBatched(w io.Writer, ops []history.Op) {
	batched := map[string]int{}
	for _, o := range ops {
		if o.Batched {
			batched[o.Kind+" "+o.Outcome]++
		}
	}
	if len(batched) == 0 {
		return
	}
	var parts []string
	for k, v := range batched {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	fmt.Fprintf(w, "batches: calls sent in a batch, by kind and outcome: %s\n", strings.Join(parts, ", "))
}
