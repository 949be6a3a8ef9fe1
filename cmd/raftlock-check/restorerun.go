package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
)

// restores lists the backup restores the run's faults sent, by send time.
func (r *runner) restores() []model.Restore {
	var out []model.Restore
	for _, f := range r.faults {
		if f.Restore != nil {
			out = append(out, *f.Restore)
		}
	}
	return out
}

// epochs is a history cut at restores (model.Epochs), three ways: as
// journalled, rewritten for (a) and for (b)/(e) (model.ClientClocks, which
// changes only TTLs, so the three cut alike).
type epochs struct {
	ops, a, e []model.Epoch
}

func splitEpochs(ops, opsA, opsE []history.Op, restores []model.Restore) (epochs, error) {
	var ep epochs
	var err error
	if ep.ops, err = model.Epochs(ops, restores); err != nil {
		return ep, fmt.Errorf("restore: %w", err)
	}
	if ep.a, err = model.Epochs(opsA, restores); err != nil {
		return ep, fmt.Errorf("restore: %w", err)
	}
	if ep.e, err = model.Epochs(opsE, restores); err != nil {
		return ep, fmt.Errorf("restore: %w", err)
	}
	return ep, nil
}

// each runs a check on every epoch and gathers its violations, each named
// with its epoch when the run restored.
func (ep epochs) each(check func(ops, opsA, opsE []history.Op) []model.Violation) []model.Violation {
	var out []model.Violation
	for i := range ep.ops {
		for _, v := range check(ep.ops[i].Ops, ep.a[i].Ops, ep.e[i].Ops) {
			if len(ep.ops) > 1 {
				v.Detail = fmt.Sprintf("[epoch %d] %s", i, v.Detail)
			}
			out = append(out, v)
		}
	}
	return out
}

// linearizable is (e) on every epoch; a lock's result in epoch i > 0 is
// named "lock@i".
func (ep epochs) linearizable(timeout time.Duration) []model.LinResult {
	var out []model.LinResult
	for i := range ep.e {
		for _, l := range model.Linearizable(ep.e[i].Ops, timeout) {
			if i > 0 {
				l.Name = fmt.Sprintf("%s@%d", l.Name, i)
			}
			out = append(out, l)
		}
	}
	return out
}

// holdProps is (h), (i), (j) on every epoch; the closing checks' findings
// (extra) once. A property is checked if it was in any epoch.
func (ep epochs) holdProps(drift float64, extra []model.Violation, note string) []property {
	var out []property
	for i := range ep.ops {
		var x []model.Violation
		n := ""
		if i == 0 {
			x, n = extra, note
		}
		ps := holdProps(ep.ops[i].Ops, ep.a[i].Ops, ep.e[i].Ops, drift, x, n)
		if out == nil {
			out = ps
			continue
		}
		for j := range ps {
			for _, v := range ps[j].violations {
				v.Detail = fmt.Sprintf("[epoch %d] %s", i, v.Detail)
				out[j].violations = append(out[j].violations, v)
			}
			if !ps[j].notChecked && out[j].notChecked {
				out[j].notChecked, out[j].note = false, ps[j].note
			}
		}
	}
	return out
}

// restoreVerdict is (k), what a restore still promises; NOT CHECKED when
// the run made no restore that answered.
func restoreVerdict(ops []history.Op, restores []model.Restore, ep epochs) property {
	p := property{id: "k", name: "a restore lowers no index and no new token"}
	answered, maybe := 0, 0
	for _, r := range restores {
		switch {
		case r.Maybe:
			maybe++
		case r.Answered != model.MaxTime:
			answered++
		}
	}
	if answered == 0 {
		p.notChecked, p.note = true, "no restore was made"
		if len(restores) > 0 {
			p.note = fmt.Sprintf("%d restores sent, none answered", len(restores))
		}
		if maybe > 0 {
			p.note += fmt.Sprintf(" (%d whose leader crashed before replicating it: may or may not have taken effect; every name left out after it until a new lease takes it)", maybe)
		}
		return p
	}
	p.violations = model.RestoreFencing(ops, restores)
	var left []string
	for i, e := range ep.ops[1:] {
		left = append(left, fmt.Sprintf("after restore %d: %d ops, %s", i+1, len(e.Ops), leftOut(e)))
	}
	p.note = fmt.Sprintf("%d restores (%d answered); (a) (b) (e) (h) (i) (j) judged per epoch, leaving out names the backup held until a new lease takes them: %s",
		len(restores), answered, strings.Join(left, "; "))
	if maybe > 0 {
		p.note += fmt.Sprintf("; %d of them crashed before replicating (may or may not have taken effect: (k) not judged for them, every name left out after them until a new lease takes it)", maybe)
	}
	return p
}

func leftOut(e model.Epoch) string {
	if len(e.Left) == 0 {
		return "none left out"
	}
	var out []string
	for _, k := range e.Left {
		if t, ok := e.From[k]; ok {
			k += fmt.Sprintf(" (to t=%.3fs)", float64(t)/1e9)
		}
		out = append(out, k)
	}
	return "left out " + strings.Join(out, " ")
}

// readAfterRestore reads every lock once, right after a restore answered:
// a lock the restore rolled back shows its index before anyone writes it
// again ((k): it must be above every index acknowledged before).
func (r *runner) readAfterRestore() {
	cl, err := r.own()
	if err != nil {
		r.logf("reads after the restore: %v", err)
		return
	}
	names := make([]string, 0, 2*r.cfg.locks)
	for i := 0; i < r.cfg.locks; i++ {
		names = append(names, fmt.Sprintf("jobs/%d", i))
	}
	if r.cfg.mix > 0 {
		names = append(names, r.cfg.rwLocks()...)
	}
	for _, n := range names {
		cl.Read(n)
	}
}
