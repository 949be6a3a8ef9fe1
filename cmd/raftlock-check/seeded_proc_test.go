package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// The end-to-end tests run the checker as a process against real raftlock
// processes. The seeded-bug tests build it with -tags raftlock_seeded_bugs,
// which puts a faulty relay in front of each node; each must end in exit
// status 1 with the property that the bug breaks reported as FAIL. They take
// about 30 s each; -short skips them.

var bins struct {
	dir, raftlock, checker, seeded string
	// seededServer is raftlock built with -tags raftlock_seeded_bugs: it
	// carries the server-side seeded bugs, off unless RAFTLOCK_SEEDED_BUG asks.
	seededServer string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// build gets the servers from testenv.Binary (RAFTLOCK_BIN may name the
// release one) and compiles the checkers, once per test process.
func build(t *testing.T) {
	t.Helper()
	if bins.checker != "" {
		return
	}
	dir, err := os.MkdirTemp("", "raftlock-check-bin-")
	if err != nil {
		t.Fatal(err)
	}
	bins.dir = dir
	goBuild := func(out string, args ...string) {
		cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, b)
		}
	}
	bins.raftlock = testenv.Binary(t)
	bins.seededServer = testenv.Binary(t, "raftlock_seeded_bugs")
	bins.seeded = filepath.Join(dir, "raftlock-check-seeded")
	goBuild(bins.seeded, "-tags", "raftlock_seeded_bugs", ".")
	bins.checker = filepath.Join(dir, "raftlock-check")
	goBuild(bins.checker, ".")
}

// runChecker runs a short check and returns its exit status and report.
func runChecker(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	out := filepath.Join(t.TempDir(), "run")
	// A history with a violation can send porcupine on a long search (a
	// 20%-fast clock's run once spent over a minute there on a loaded
	// machine); bound it, so the run ends with its verdicts in time.
	// --mix 0 and --time-probes 0: these runs are tuned to provoke lock
	// bugs; the mixed cycles and the time probes would only thin them
	// out (a test may pass either itself).
	args = append([]string{"--raftlock-bin", bins.raftlock, "--out", out, "--snapshot-wait", "0", "--lin-timeout", "20s", "--mix", "0", "--time-probes", "0"}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running the checker: %v\n%s", err, buf.String())
	}
	return code, buf.String()
}

// verdict returns the report line of one property.
func verdict(report, id string) string {
	lines, i := verdictAt(report, id)
	if i < 0 {
		return ""
	}
	return lines[i]
}

// verdictWithNote is a property's verdict line and the note printed under it.
func verdictWithNote(report, id string) string {
	lines, i := verdictAt(report, id)
	if i < 0 || i+1 == len(lines) {
		return ""
	}
	return lines[i] + "\n" + lines[i+1]
}

// verdictAt splits report into lines and finds property id's verdict, -1
// when there is none.
func verdictAt(report, id string) ([]string, int) {
	lines := strings.Split(report, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "("+id+")") {
			return lines, i
		}
	}
	return lines, -1
}

func seededBug(t *testing.T, bug string, mustFail ...string) {
	if testing.Short() {
		t.Skip("end-to-end run of about 30 s")
	}
	build(t)
	code, report := runChecker(t, bins.seeded, []string{"RAFTLOCK_SEEDED_BUG=" + bug},
		"--duration", "20s", "--seed", "4242", "--faults", "leader-kill,holder-pause,leader-transfer")
	if code != 1 {
		t.Fatalf("seeded bug %s: exit status %d, want 1\n%s", bug, code, report)
	}
	for _, id := range mustFail {
		if !strings.Contains(verdict(report, id), "FAIL") {
			t.Errorf("seeded bug %s: property (%s) not reported as failing\n%s", bug, id, report)
		}
	}
	if !strings.Contains(report, "RESULT: FAIL") || !strings.Contains(report, "kept in") {
		t.Errorf("seeded bug %s: the report does not name the kept run directory\n%s", bug, report)
	}
}

// grant-over-holder: acquire skips the lease check and takes a held lock
// from its holder. Two clients hold one lock (a); the model sees a grant
// while the lease must hold (e).
func TestSeededBugGrantOverHolder(t *testing.T) { seededBug(t, "grant-over-holder", "a", "e") }

// early-expiry: leases expire after a quarter of their TTL.
func TestSeededBugEarlyExpiry(t *testing.T) { seededBug(t, "early-expiry", "a", "e") }

// phantom-release: a release is acknowledged but never applied; the lock
// is later found held by a lease its client released.
func TestSeededBugPhantomRelease(t *testing.T) { seededBug(t, "phantom-release", "e") }

// session-early-expiry: sessions (and every lock and permit held in them)
// expire after a quarter of their TTL. Others get a session's locks and
// permits while it must still hold: (a), (i) or (j).
func TestSeededBugSessionEarlyExpiry(t *testing.T) {
	code, report := seededHolds(t, "session-early-expiry")
	if code != 1 {
		t.Fatalf("exit status %d, want 1\n%s", code, report)
	}
	if !strings.Contains(verdict(report, "a")+verdict(report, "i")+verdict(report, "j"), "FAIL") {
		t.Errorf("none of (a), (i), (j) reported as failing\n%s", report)
	}
}

// semaphore-over-limit: the server is asked for limit+1 permits and the
// client told limit: limit+1 permits are valid at once, (i).
func TestSeededBugSemaphoreOverLimit(t *testing.T) {
	code, report := seededHolds(t, "semaphore-over-limit")
	if code != 1 || !strings.Contains(verdict(report, "i"), "FAIL") {
		t.Fatalf("exit status %d, want 1 with (i) failing\n%s", code, report)
	}
}

// seededHolds runs the mixed cycles alone (--mix 1) against a relay
// seeded with bug.
func seededHolds(t *testing.T, bug string) (int, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end run of about 30 s")
	}
	build(t)
	code, report := runChecker(t, bins.seeded, []string{"RAFTLOCK_SEEDED_BUG=" + bug},
		"--duration", "20s", "--seed", "4242", "--mix", "1", "--faults", "holder-pause")
	t.Logf("verdicts:\n%s\n%s\n%s\n%s", verdict(report, "a"), verdict(report, "h"), verdict(report, "i"), verdict(report, "j"))
	return code, report
}

// waiter-timeout-release (in the server itself): a parked acquire
// whose wait runs out while its grant is in flight is answered with that
// grant, which the server has just released. The workload's boundary cycles
// aim waits at the instants holders release, and retry each grant on another
// node, so the bug is met many times a run: the next grant overlaps the
// released one (a), or the retry gets a new token while the lease must hold
// (b). Only holder pauses are injected: the bug needs no faults, and they
// keep (c)'s unfenced register losing writes.
func TestSeededBugWaiterTimeoutRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run of about 50 s")
	}
	build(t)
	code, report := runChecker(t, bins.seeded, []string{"RAFTLOCK_SEEDED_BUG=waiter-timeout-release"},
		"--raftlock-bin", bins.seededServer, "--duration", "40s", "--seed", "4242", "--clients", "8", "--locks", "2", "--faults", "holder-pause")
	if code != 1 {
		t.Fatalf("exit status %d, want 1\n%s", code, report)
	}
	if !strings.Contains(verdict(report, "a"), "FAIL") && !strings.Contains(verdict(report, "b"), "FAIL") {
		t.Errorf("neither (a) nor (b) reported as failing\n%s", report)
	}
	if !strings.Contains(verdict(report, "e"), "FAIL") {
		t.Errorf("(e) not reported as failing\n%s", report)
	}
}

// The same server build without the environment variable has no bug: the
// same workload passes.
func TestSeededServerIsCorrectUnlessAsked(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run of about 30 s")
	}
	build(t)
	code, report := runChecker(t, bins.checker, nil,
		"--raftlock-bin", bins.seededServer, "--duration", "20s", "--seed", "4242", "--clients", "8", "--locks", "2", "--faults", "holder-pause")
	if code != 0 {
		t.Fatalf("exit status %d, want 0\n%s", code, report)
	}
}

// restore-lowers-index (in the server): a backup restore raises every
// lock's index to the log's last index and installs the backup a second
// later without holding writes off, as without appendMu.
// A lock granted in that second reads a lower index after the restore
// than the token it was granted: (k) fails (and (f), when a workload read
// saw the grant). Only restores are injected.
func TestSeededBugRestoreLowersIndex(t *testing.T) {
	code, report := restoreRun(t, []string{"RAFTLOCK_SEEDED_BUG=restore-lowers-index"})
	if code != 1 {
		t.Fatalf("exit status %d, want 1\n%s", code, report)
	}
	if !strings.Contains(verdict(report, "k"), "FAIL") {
		t.Errorf("(k) not reported as failing\n%s", report)
	}
}

// The same run on the same server build without the variable passes: the
// restores roll leases back, and no property is judged across them that a
// restore does not promise.
func TestRestoreFaultPassesOnCorrectServer(t *testing.T) {
	code, report := restoreRun(t, nil)
	if code != 0 {
		t.Fatalf("exit status %d, want 0\n%s", code, report)
	}
	if !strings.Contains(verdict(report, "k"), "PASS") {
		t.Errorf("(k) not checked: no restore answered\n%s", report)
	}
}

// restoreRun runs the checker with restores alone (short calm periods, so
// that 20 s make two) against the seeded server build: the seeded checker
// with env, which names the bug, else the ordinary checker.
func restoreRun(t *testing.T, env []string) (int, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end run of about 30 s")
	}
	build(t)
	checker := bins.checker
	if env != nil {
		checker = bins.seeded
	}
	code, report := runChecker(t, checker, env,
		"--raftlock-bin", bins.seededServer, "--duration", "20s", "--seed", "4242", "--faults", "restore", "--calm-min", "1s", "--calm-max", "2s")
	t.Logf("verdicts:\n%s\n%s\n%s\n%s", verdict(report, "a"), verdict(report, "e"), verdict(report, "f"), verdict(report, "k"))
	return code, report
}

// restore-unrecorded (in the server): the bug the unconfirmed-restore record prevents. With
// --faults restore-crash the leader that takes a backup restore kills
// itself once raft has installed it, before any follower has it, and comes
// back as soon as the others have a leader. Without the unconfirmed-restore
// record it takes the new leader's entries on top of the restore it alone
// holds: its state is neither the backup's nor the cluster's, (g) (and (d)
// when a closing op lands on a lock the two states disagree on).
func TestSeededBugRestoreUnrecorded(t *testing.T) {
	code, report := restoreCrashRun(t, []string{"RAFTLOCK_SEEDED_BUG=restore-unrecorded"})
	if code != 1 {
		t.Fatalf("exit status %d, want 1\n%s", code, report)
	}
	if !strings.Contains(verdict(report, "g")+verdict(report, "d"), "FAIL") {
		t.Errorf("neither (g) nor (d) reported as failing\n%s", report)
	}
}

// The same run on the same server build without the variable passes: the
// crashed leader's record fences it until the leader's snapshot replaces
// its restore, and the model lets the epoch after a restore that may or may
// not have taken effect start from either state. Every node answers the
// state check at the end: a crashed leader still fenced then would pass
// (g) unjudged.
func TestRestoreCrashPassesOnCorrectServer(t *testing.T) {
	code, report := restoreCrashRun(t, nil)
	if code != 0 {
		t.Fatalf("exit status %d, want 0\n%s", code, report)
	}
	if g := verdictWithNote(report, "g"); !strings.Contains(g, "PASS") || !strings.Contains(g, "on 3 nodes") || strings.Contains(g, "not checked") {
		t.Errorf("(g) not judged on every node:\n%s", g)
	}
}

// restoreCrashRun runs the checker with --faults restore-crash (and holder
// pauses, so that the unfenced register loses writes and (c) is judged)
// against the seeded server build, on --log-store boltdb: on the WAL a node
// started on a snapshot past its log's end clears the log
// (raftnode/logstore/clearlog.go), so the crashed leader can only catch up by the
// leader's snapshot and the bug has nothing to act on (for the same reason
// the checker snapshots far apart with restore-crash, so the correct server
// must compact on the crashed node's refusal, compactPastRefused). Every
// restore-crash fault must have crashed its leader at the crash point, or
// the run proves nothing.
func restoreCrashRun(t *testing.T, env []string) (int, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end run of about 25 s")
	}
	build(t)
	checker := bins.checker
	if env != nil {
		checker = bins.seeded
	}
	code, report := runChecker(t, checker, env,
		"--raftlock-bin", bins.seededServer, "--log-store", "boltdb", "--duration", "22s", "--seed", "4242",
		"--faults", "restore-crash,holder-pause", "--calm-min", "1s", "--calm-max", "2s")
	t.Logf("verdicts:\n%s\n%s\n%s\n%s\n%s", verdict(report, "a"), verdict(report, "d"), verdict(report, "e"), verdict(report, "g"), verdict(report, "k"))
	crashes, others := 0, 0
	for _, l := range strings.Split(report, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "restore-crash" {
			if strings.Contains(l, "crashed at restore-installed") && !strings.Contains(l, "ERROR") {
				crashes++
			} else {
				others++
			}
		}
	}
	if crashes == 0 || others > 0 {
		t.Fatalf("%d restore-crash faults crashed their leader at the crash point, %d did not: the run proves nothing\n%s", crashes, others, report)
	}
	return code, report
}

// tick-only-when-due (in the server): the leader loop before the FSM clock
// was stamped at least every TickInterval. It writes a tick only when a
// deadline falls due, so while leases run far from their deadlines and no
// client writes, no entry moves the FSM clock, and a new leader counts
// from the last one: a leader kill restarts every running lease. One
// client abandons leases of 3-10 s and probes them (the cluster stays
// quiet between its writes), and the leader is killed every few seconds:
// the probe's reads find a lease held past its bound, (l).
func TestSeededBugTickOnlyWhenDue(t *testing.T) {
	code, report := tickRun(t, []string{"RAFTLOCK_SEEDED_BUG=tick-only-when-due"})
	if code != 1 || !strings.Contains(verdict(report, "l"), "FAIL") {
		t.Fatalf("exit status %d, want 1 with (l) failing\n%s", code, report)
	}
}

// The same run on the same server build without the variable passes, and
// (l) judged leases after their bound.
func TestLeaseEndBoundPassesOnCorrectServer(t *testing.T) {
	code, report := tickRun(t, nil)
	if code != 0 || !strings.Contains(verdict(report, "l"), "PASS") {
		t.Fatalf("exit status %d, want 0 with (l) passing (not NOT CHECKED)\n%s", code, report)
	}
}

func tickRun(t *testing.T, env []string) (int, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end run of about 40 s")
	}
	build(t)
	checker := bins.checker
	if env != nil {
		checker = bins.seeded
	}
	code, report := runChecker(t, checker, env,
		"--raftlock-bin", bins.seededServer, "--duration", "30s", "--seed", "4242", "--clients", "1", "--locks", "1",
		"--time-probes", "1", "--time-probe-kinds", "abandon", "--faults", "leader-kill", "--calm-min", "1s", "--calm-max", "3s")
	t.Logf("verdicts:\n%s\n%s", verdict(report, "c"), verdict(report, "l"))
	return code, report
}

// waiter-late (in the server): the leader serves a lock's parked acquires
// 4 s late. Three clients hand one lock off (hold 0.2-1 s, release) while
// the others park for it: a waiter is granted long after the release that
// freed the lock, with no fault near, (m).
func TestSeededBugWaiterLate(t *testing.T) {
	code, report := wakeRun(t, []string{"RAFTLOCK_SEEDED_BUG=waiter-late"})
	if code != 1 || !strings.Contains(verdict(report, "m"), "FAIL") {
		t.Fatalf("exit status %d, want 1 with (m) failing\n%s", code, report)
	}
}

// session-late (in the server): every session lasts 3 s past its TTL.
// Sessions abandoned with a lock in them are probed: a read after the
// session's bound still shows its lease, (n).
func TestSeededBugSessionLate(t *testing.T) {
	code, report := wakeRun(t, []string{"RAFTLOCK_SEEDED_BUG=session-late"})
	if code != 1 || !strings.Contains(verdict(report, "n"), "FAIL") {
		t.Fatalf("exit status %d, want 1 with (n) failing\n%s", code, report)
	}
}

// The clean twin of both: the same run without the variable passes, with
// (m) and (n) judged, not NOT CHECKED.
func TestWakeAndSessionBoundsPassOnCorrectServer(t *testing.T) {
	code, report := wakeRun(t, nil)
	if code != 0 || !strings.Contains(verdict(report, "m"), "PASS") || !strings.Contains(verdict(report, "n"), "PASS") {
		t.Fatalf("exit status %d, want 0 with (m) and (n) passing\n%s", code, report)
	}
}

// wakeRun runs hand-offs and abandoned sessions alone, with no fault (a
// wake-up is judged only away from faults).
func wakeRun(t *testing.T, env []string) (int, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end run of about 35 s")
	}
	build(t)
	checker := bins.checker
	if env != nil {
		checker = bins.seeded
	}
	code, report := runChecker(t, checker, env,
		"--raftlock-bin", bins.seededServer, "--duration", "25s", "--seed", "4242", "--clients", "3", "--locks", "1",
		"--time-probes", "1", "--time-probe-kinds", "handoff,session", "--faults", "")
	t.Logf("verdicts:\n%s\n%s\n%s", verdict(report, "l"), verdict(report, "m"), verdict(report, "n"))
	return code, report
}

// An ordinary build refuses to seed a bug.
func TestOrdinaryBuildHasNoSeededBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	build(t)
	code, report := runChecker(t, bins.checker, []string{"RAFTLOCK_SEEDED_BUG=early-expiry"}, "--duration", "1s")
	if code == 0 || !strings.Contains(report, "raftlock_seeded_bugs") {
		t.Fatalf("exit %d, want a refusal naming the build tag\n%s", code, report)
	}
}
