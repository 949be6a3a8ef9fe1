package logstore

import (
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ClearLogBelowSnapshot finishes, at start, a log reset that a kill cut
// off. After hashicorp/raft saves a snapshot it did not take from its own
// log (a follower installing the leader's, or a backup restore), it
// restores the machine from it and then, on a store that only takes
// contiguous appends (a MonotonicLogStore: the WAL), clears the whole log
// (removeOldLogs). Killed in between, the data dir holds a snapshot at S
// beside a log that ends at L < S. Raft starts from the snapshot and
// appends S+1, which the WAL refuses after L, on every try: a single node
// steps down and is elected again forever; a follower only gets going
// after its leader walks back, one entry a round trip, to its snapshot.
//
// So when the snapshot raft will start from is above the log's last
// index, every entry in the log is covered by it, and they are cleared
// here, as raft would have: DeleteRange(first, last). An entry at or above
// that snapshot's index is never touched: nothing is done unless the whole
// log is below it. "The snapshot raft will start from" is the first in
// List's order that opens (its CRC checks) and restores (restore decodes
// it into a scratch machine): raft skips one that does not and falls back
// to an older one, which would need the log.
//
// A store that takes gaps (boltdb) is left alone: raft appends S+1 after L
// there and compacts the old entries in time, as it does after any install
// on it.
func ClearLogBelowSnapshot(logs raft.LogStore, snaps raft.SnapshotStore, restore func(io.Reader) error, log hclog.Logger) error {
	if m, ok := logs.(raft.MonotonicLogStore); !ok || !m.IsMonotonic() {
		return nil
	}
	first, last, err := span(logs)
	if err != nil {
		return fmt.Errorf("inspect raft log: %w", err)
	}
	if last == 0 {
		return nil
	}
	list, err := snaps.List()
	if err != nil {
		return fmt.Errorf("inspect snapshots: %w", err)
	}
	for _, s := range list {
		if s.Index <= last {
			return nil // raft starts from this one or an older one: the log goes on from it
		}
		if err := checkSnapshot(snaps, s.ID, restore); err != nil {
			log.Warn("snapshot above the raft log's end does not restore; raft will skip it too", "id", s.ID, "index", s.Index, "error", err)
			continue
		}
		log.Warn("the raft log ends below the newest snapshot (a stop between saving that snapshot and clearing the log it covers): clearing the log, as raft would have",
			"first", first, "last", last, "snapshot_index", s.Index)
		if err := logs.DeleteRange(first, last); err != nil {
			return fmt.Errorf("clear raft log %d-%d below snapshot %d: %w", first, last, s.Index, err)
		}
		return nil
	}
	return nil
}

// checkSnapshot opens snapshot id (the store checks its CRC) and feeds it
// to restore, as raft does when it starts from it.
func checkSnapshot(snaps raft.SnapshotStore, id string, restore func(io.Reader) error) error {
	_, rc, err := snaps.Open(id)
	if err != nil {
		return err
	}
	defer rc.Close()
	return restore(rc)
}
