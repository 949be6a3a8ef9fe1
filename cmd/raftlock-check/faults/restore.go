package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/cluster"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
)

// restoreBackup saves a backup from the leader, lets the workload run on
// for 0.5-3 s (grants and releases the restore will roll back), then
// restores it, resending to whichever node leads until an answer is
// definite. f.Restore records the window the restore took effect in: from
// the first send to the answer of the one that succeeded (never answered:
// math.MaxInt64, so nothing after the first send counts as after it).
func (in *Injector) restoreBackup(ctx, readyCtx context.Context, leader *cluster.Node, f *Fault) error {
	f.Target = leader.ID
	hc := &http.Client{Timeout: 20 * time.Second}
	req, _ := http.NewRequestWithContext(readyCtx, http.MethodGet, leader.URL()+"/v1/snapshot", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	backup, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("save: status %d: %v %.200s", resp.StatusCode, err, backup)
	}
	saved := history.Now()
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
