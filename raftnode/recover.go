package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode/logstore"
	"go.etcd.io/bbolt"
)

// Recover rewrites the Raft configuration of a stopped node's data dir to
// peers (id -> Raft address), with hashicorp/raft's RecoverCluster: after
// losing a quorum for good, the survivors start as a smaller cluster. Every
// survivor must get the same peers. Writes acknowledged only by lost nodes
// are lost; a lost node that comes back afterwards could form a second
// cluster. logStore is the serve flag of the same name; "" finds the log
// where it is.
func Recover(dataDir, logStore string, peers map[string]string, logger hclog.Logger) error {
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "raftlock"})
	}
	log := logger.Named("recover")
	if len(peers) == 0 {
		return errors.New("recover: at least one peer is required")
	}
	if logStore == "" {
		// Wherever the log is now: recovering must not move it between
		// stores (the next start with the node's own flag would move it back).
		logStore = LogStoreBoltDB
		if ok, err := logstore.HasWAL(dataDir); err != nil {
			return fmt.Errorf("recover: %w", err)
		} else if ok {
			logStore = LogStoreWAL
		}
	}
	dbPath := filepath.Join(dataDir, "raft.db")
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("recover: %s: %w (is %s a node's data dir?)", dbPath, err, dataDir)
	}
	if err := logstore.CheckBoltFile(dbPath); err != nil {
		return err
	}
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        dbPath,
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return fmt.Errorf("recover: open raft store in %s (is the node still running?): %w", dataDir, err)
	}
	defer store.Close()
	logs, closer, err := logstore.Open(dataDir, logStore, store, log)
	if err != nil {
		return err
	}
	defer closer.Close()
	files, err := raft.NewFileSnapshotStoreWithLogger(dataDir, 2, logger.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("recover: open snapshot store: %w", err)
	}
	snapDir := filepath.Join(dataDir, "snapshots")
	snaps := logstore.NewPrivateSnapshots(files, snapDir, log)
	var servers []raft.Server
	for id, addr := range peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: raft.Voter})
	}
	machine := fsm.New()
	f := &raftFSM{m: machine}
	f.integrity.log.Store(&log)
	rc := raft.DefaultConfig()
	rc.Logger = logger.Named("raft")
	rc.LocalID = servers[0].ID // RecoverCluster checks the config only; no node runs
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	if err := raft.RecoverCluster(rc, f, logs, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("recover cluster in %s: %w", dataDir, err)
	}
	if err := logstore.MakePrivate(snapDir); err != nil {
		return fmt.Errorf("recover: snapshot store %s: %w", snapDir, err)
	}
	log.Warn("configuration rewritten", "dir", dataDir, "voters", len(servers), "last_index", machine.Clock().Index, "locks", machine.HeldCount())
	return nil
}
