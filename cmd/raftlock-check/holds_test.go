package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/register"
)

// The seeded twins of the mixed cycles, at the level of the whole checker: a
// journal in which a session's lock goes to another client while the
// session must still hold, and one in which limit+1 permits are valid at
// once, must each make the run FAIL on the right property; the same
// journals with the second grant moved past the first hold's end pass.
// (The server-side seeded bugs are not the checker's to write; these show
// the checker would see them.)

// jop is one journalled call and its answer; times in ms.
type jop struct {
	client         int
	kind, name     string
	lease, session string
	ttl, limit     int64
	mode           string
	call, ret      int64
	out            string
	token          uint64
	slot           int
}

func writeJournal(t *testing.T, dir string, ops []jop) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "journal"), 0o755); err != nil {
		t.Fatal(err)
	}
	j, err := history.Create(filepath.Join(dir, "journal", "c1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	const base = int64(1000 * time.Second) // CLOCK_MONOTONIC of the run's start
	for i, o := range ops {
		id := "op" + string(rune('a'+i))
		j.Write(history.Entry{Kind: "call", ID: id, Client: o.client, Op: o.kind, Name: o.name, Lease: o.lease, Session: o.session,
			TTLMs: o.ttl, Limit: o.limit, Mode: o.mode, Time: base + o.call*int64(time.Millisecond)})
		r := history.Entry{Kind: "ret", ID: id, Client: o.client, Time: base + o.ret*int64(time.Millisecond), Outcome: o.out, Token: o.token, Slot: o.slot}
		if o.kind == history.SemAcquire {
			r.Limit = o.limit
		}
		j.Write(r)
	}
}

func checkJournal(t *testing.T, ops []jop) (*runner, string) {
	t.Helper()
	dir := t.TempDir()
	writeJournal(t, dir, ops)
	var out bytes.Buffer
	r := &runner{cfg: config{drift: 0.02, linTimeout: 10 * time.Second, mix: 0.4, locks: 1}, dir: dir, out: &out, reg: register.New()}
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
	r.rep.print(r)
	return r, out.String()
}

func TestSeededTwinSessionLockGivenAway(t *testing.T) {
	give := func(at int64) []jop {
		return []jop{
			{client: 1, kind: history.SessCreate, session: "s01-000001-00000001", ttl: 2000, call: 0, ret: 10, out: history.OK},
			{client: 1, kind: history.Acquire, name: "rw/0", lease: "r01-000002-00000002", session: "s01-000001-00000001", call: 20, ret: 30, out: history.OK, token: 10},
			{client: 1, kind: history.SessRenew, session: "s01-000001-00000001", ttl: 2000, call: 1000, ret: 1010, out: history.OK},
			// The session is valid until 1000 + 2000×0.98 = 2960 ms.
			{client: 2, kind: history.Acquire, name: "rw/0", lease: "r02-000001-00000003", ttl: 1000, call: at, ret: at + 10, out: history.OK, token: 12},
		}
	}
	r, report := checkJournal(t, give(1500))
	if !r.failed() || !strings.Contains(verdict(report, "a"), "FAIL") {
		t.Fatalf("a session's lock granted to another while the session must hold: want (a) FAIL\n%s", report)
	}
	_, report = checkJournal(t, give(3000))
	if passed(report, "a", "h") != nil {
		t.Fatalf("granted after the session's ttl ran out: want PASS\n%s", report)
	}
}

func TestSeededTwinLimitPlusOnePermits(t *testing.T) {
	third := func(at int64, slot int) []jop {
		return []jop{
			{client: 1, kind: history.SemAcquire, name: "sem/0", lease: "p01-000001-00000001", ttl: 2000, limit: 2, call: 0, ret: 10, out: history.OK, token: 10, slot: 0},
			{client: 2, kind: history.SemAcquire, name: "sem/0", lease: "p02-000001-00000002", ttl: 2000, limit: 2, call: 20, ret: 30, out: history.OK, token: 11, slot: 1},
			{client: 1, kind: history.SemRelease, name: "sem/0", lease: "p01-000001-00000001", call: 500, ret: 510, out: history.OK},
			{client: 3, kind: history.SemAcquire, name: "sem/0", lease: "p03-000001-00000003", ttl: 2000, limit: 2, call: at, ret: at + 10, out: history.OK, token: 12, slot: slot},
		}
	}
	r, report := checkJournal(t, third(100, 0)) // while both permits hold
	if !r.failed() || !strings.Contains(verdict(report, "i"), "FAIL") || !strings.Contains(report, "3 permits valid at once") {
		t.Fatalf("limit+1 permits valid at once: want (i) FAIL\n%s", report)
	}
	_, report = checkJournal(t, third(600, 0)) // after slot 0 was released
	if passed(report, "a", "i") != nil {
		t.Fatalf("a third permit after a release: want PASS\n%s", report)
	}
}

// passed returns the verdicts among ids that are not PASS ((c) needs the
// unfenced register to lose writes, which a hand-made journal has none of).
func passed(report string, ids ...string) []string {
	var bad []string
	for _, id := range ids {
		if v := verdict(report, id); !strings.HasSuffix(strings.TrimSpace(v), "PASS") {
			bad = append(bad, v)
		}
	}
	return bad
}
