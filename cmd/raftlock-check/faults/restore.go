package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// restoreBackup saves a backup from the leader, lets the workload run on
// for 0.5-3 s (grants and releases the restore will roll back), then
// restores it, resending to whichever node leads until an answer is
// definite. f.Restore records the window the restore took effect in: from
// the first send to the answer of the one that succeeded (never answered:
// math.MaxInt64, so nothing after the first send counts as after it).
func (in *Injector) restoreBackup(ctx, readyCtx context.Context, leader *procs.Node, f *Fault) error {
	f.Target = leader.ID
	hc := &http.Client{Timeout: 20 * time.Second}
	backup, saved, err := saveBackup(readyCtx, hc, leader)
	if err != nil {
		return err
	}
	wait := in.between(500*time.Millisecond, 3*time.Second)
	in.sleep(ctx, wait)
	r := &model.Restore{Saved: saved, Answered: math.MaxInt64, Backup: backup}
	deadline := time.Now().Add(30 * time.Second)
	tries := 0
	for ctx.Err() == nil && time.Now().Before(deadline) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := in.C.WaitReady(tctx)
		cancel()
		if err != nil {
			continue
		}
		tries++
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.URL()+"/v1/snapshot", bytes.NewReader(backup))
		req.Header.Set("Content-Type", "application/octet-stream")
		if r.Sent == 0 {
			r.Sent = history.Now()
			f.Restore = r
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue // unknown: it may have applied; resent (a second restore of the same file is harmless)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			r.Answered = history.Now()
			f.Target = l.ID
			f.Detail = fmt.Sprintf("backup of %d bytes saved, restored %v later on %s (%d sends, restore took %v)",
				len(backup), time.Duration(r.Sent-saved).Round(time.Millisecond), l.ID, tries, time.Duration(r.Answered-r.Sent).Round(time.Millisecond))
			return nil
		case resp.StatusCode >= 400 && resp.StatusCode < 500:
			return fmt.Errorf("restore refused: status %d %.200s", resp.StatusCode, body)
		}
		// 5xx: no leader (nothing changed) or unknown outcome; resend.
		in.sleep(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("restore: no definite answer in %d sends", tries)
}

// saveBackup saves a backup from n (GET /v1/snapshot) and returns it with
// the time of the answer.
func saveBackup(ctx context.Context, hc *http.Client, n *procs.Node) ([]byte, int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+"/v1/snapshot", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("save: %w", err)
	}
	backup, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("save: status %d: %v %.200s", resp.StatusCode, err, backup)
	}
	return backup, history.Now(), nil
}

// CrashPointEnv and CrashPoint are what a raftlock test build
// (-tags raftlock_seeded_bugs, raftnode/seeded_on.go) takes to kill itself
// right after raft installed a backup restore on the leader, before any
// follower has it. CrashArmedLine and CrashLine are what it logs.
const (
	CrashPointEnv  = "RAFTLOCK_CRASH_POINT"
	CrashPoint     = "restore-installed"
	CrashArmedLine = `CRASH POINT "restore-installed" armed`
	CrashLine      = `CRASH POINT "restore-installed" reached`
)

// restoreCrash is a backup restore whose leader dies at the worst moment:
// the nodes run with the crash point restore-installed, so the leader that
// takes the POST kills itself (SIGKILL, no cleanup) once raft has written
// the backup to its snapshot store and the FSM has it, before the no-op
// that would replicate it. Nobody else has the restore: the others elect a
// leader without it and go on. As soon as that leader is ready the dead
// node is started again (at once, and the checker's nodes snapshot far
// apart in such runs, so that it comes back while the new leader's log
// still reaches below the restore: once that log is compacted, raft
// catches it up by snapshot whatever it held, and a node that takes the
// cluster's entries on top of its own restore, the bug the
// unconfirmed-restore record fixed, would go unseen), and the workload
// goes on.
//
// The restore's outcome is unknown to the client (its connection broke),
// but bounded: it took effect, if at all, between the send and the moment
// a leader of a later term was ready without it (that leader's committed
// no-op sits at the restore's index, so no later leader can hold the
// restore). f.Restore records that window with Maybe set (model.Restore).
func (in *Injector) restoreCrash(ctx, readyCtx context.Context, leader *procs.Node, f *Fault) error {
	f.Target = leader.ID
	if countInLog(leader.LogPath, CrashArmedLine) == 0 {
		return fmt.Errorf("%s was not started with %s=%s in a raftlock_seeded_bugs build", leader.ID, CrashPointEnv, CrashPoint)
	}
	hc := &http.Client{Timeout: 20 * time.Second}
	backup, saved, err := saveBackup(readyCtx, hc, leader)
	if err != nil {
		return err
	}
	in.sleep(ctx, in.between(500*time.Millisecond, 3*time.Second))
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	l, err := in.C.WaitReady(tctx)
	cancel()
	if err != nil {
		return err
	}
	f.Target = l.ID
	crashes := countInLog(l.LogPath, CrashLine)
	r := &model.Restore{Saved: saved, Answered: math.MaxInt64, Backup: backup, Maybe: true}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.URL()+"/v1/snapshot", bytes.NewReader(backup))
	req.Header.Set("Content-Type", "application/octet-stream")
	r.Sent = history.Now()
	f.Restore = r
	resp, err := hc.Do(req)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			// No crash: an ordinary restore that answered.
			r.Answered, r.Maybe = history.Now(), false
			return fmt.Errorf("%s answered the restore (status 200) instead of crashing", l.ID)
		}
		err = fmt.Errorf("status %d %.200s", resp.StatusCode, body)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not crash after the restore (%v); its outcome is left unknown", l.ID, err)
	}
	died := history.Now()
	if countInLog(l.LogPath, CrashLine) == crashes {
		return fmt.Errorf("%s exited without reaching the crash point (%v)", l.ID, err)
	}
	l.Kill() // reap it: the cluster counts a process that exited by itself as running
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	nl, werr := in.C.WaitReady(wctx)
	cancel()
	if werr != nil {
		l.Start()
		return fmt.Errorf("no leader after the crash: %w", werr)
	}
	r.Answered = history.Now()
	if err := l.Start(); err != nil {
		return err
	}
	f.Detail = fmt.Sprintf("backup of %d bytes saved, restore sent %v later to %s, which crashed at %s after %v (%v); %s led %v later; %s restarted at once",
		len(backup), time.Duration(r.Sent-saved).Round(time.Millisecond), l.ID, CrashPoint, time.Duration(died-r.Sent).Round(time.Millisecond), err,
		nl.ID, time.Duration(r.Answered-died).Round(time.Millisecond), l.ID)
	if err := in.caughtUp(ctx, l, 20*time.Second); err != nil {
		return err
	}
	return nil
}
