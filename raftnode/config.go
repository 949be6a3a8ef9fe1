package raftnode

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/raftnode/logstore"
)

// Config is everything a node needs; cmd/raftlock fills it from flags.
type Config struct {
	ID            string            // this node's id, unique in the cluster
	DataDir       string            // Raft log, stable store and snapshots
	RaftAddr      string            // listen address of the Raft transport
	AdvertiseRaft string            // address peers dial; RaftAddr when empty
	RaftListener  net.Listener      // optional: serve Raft on this bound listener instead of RaftAddr
	AdvertiseHTTP string            // HTTP address other nodes forward to
	Peers         map[string]string // initial voters id -> Raft address; used only on a fresh data dir
	Join          string            // HTTP URL of a running node to join through, fresh data dir only

	// LogStore is where the Raft log lives: LogStoreWAL (DATA/wal) or
	// LogStoreBoltDB (raft.db, which is the stable store either way). A log
	// found in the other store is moved on start (see logstore.Open).
	// Empty: DefaultLogStore (the WAL).
	LogStore string

	// RaftTLS, when set, makes Raft traffic mutual TLS: the same config
	// serves accepted connections (ClientCAs, ClientAuth) and dials peers
	// (RootCAs, Certificates), as tlsconfig.Bundle.Peer builds it.
	RaftTLS *tls.Config
	// RaftDial, when set, opens the connections to peers' Raft ports in
	// place of a TCP dial (TLS, with RaftTLS, runs over them). Tests cut
	// links with it (internal/testenv Partition).
	RaftDial func(ctx context.Context, addr string) (net.Conn, error)
	// Announce tells the node at target (the leader's HTTP address, or
	// Join) this node's id and addresses: a join on a fresh data dir, else
	// how the cluster learns where to forward to it. httpapi.Joiner builds
	// it, with the API's TLS and token. nil: the node never announces (and
	// Join cannot work).
	Announce func(ctx context.Context, target, id, raftAddr, httpAddr string) error
	// FetchProgress asks a member, at its HTTP address, for its own progress
	// (promote.go). The leader promotes a joined non-voter only once it
	// reports having caught up, and counts only members that answer as
	// healthy voters. nil: joined nodes stay non-voters.
	FetchProgress ProgressFetcher

	// Timing of Raft itself. Zero values take production defaults.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration

	SnapshotThreshold uint64        // entries between snapshots; 0: 8192
	SnapshotInterval  time.Duration // how often to check the threshold; 0: 30s
	TrailingLogs      uint64        // entries kept after a snapshot; 0: 10240

	// TickInterval bounds how long the leader lets the FSM clock lag while
	// leases exist, and so how much a failover can lengthen a lease beyond
	// the leaderless gap. 0: 250ms.
	TickInterval time.Duration
	// StateCheckInterval: how often a leader compares replicas' state
	// hashes (integrity.go). 0: DefaultStateCheckInterval; < 0: never.
	StateCheckInterval time.Duration
	// ApplyTimeout bounds the wait to enqueue a write into Raft. 0: 5s.
	ApplyTimeout time.Duration

	// MaxPendingApplies bounds client writes in flight through Raft on the
	// leader; beyond it writes are shed with ErrOverloaded. 0: 1024.
	MaxPendingApplies int
	// Bounds on parked acquires (wait_ms); beyond them acquires get
	// ErrOverloaded. 0: DefaultMaxWaitersPerLock, DefaultMaxWaiters.
	MaxWaitersPerLock int
	MaxWaiters        int

	// AllowLostVoteRecord lets a node start whose data dir holds a log or
	// snapshots but no vote record (raft.db lost): it may then vote twice in
	// one term. Off, such a node refuses to start.
	AllowLostVoteRecord bool

	// ReadyMaxLag: a follower more than this many entries behind the
	// leader's commit index (as the leader last told it) is not ready.
	// 0: DefaultReadyMaxLag.
	ReadyMaxLag uint64

	// NoSendAhead makes the leader write a batch to its own log before any
	// follower sees it, as hashicorp/raft alone does; by default it sends
	// the batch to idle followers first (sendahead.go).
	NoSendAhead bool

	// barrier replaces raft's Barrier in tests that need it to fail.
	barrier func() error
	// wrapLogs wraps the log store (below the cache) in tests that need
	// its writes to fail.
	wrapLogs func(raft.LogStore) raft.LogStore
	// onAppend sees each AppendEntries request before raft does, in tests
	// that need to hold a follower back.
	onAppend func(*raft.AppendEntriesRequest)

	Clock  Clock        // monotonic clock stamped into entries; nil: the system clock
	Logger hclog.Logger // nil: a default logger
}

// Log store kinds for Config.LogStore, as the logstore package names them.
const (
	LogStoreWAL     = logstore.WAL
	LogStoreBoltDB  = logstore.BoltDB
	DefaultLogStore = logstore.Default
)

// ValidLogStore reports whether kind names a log store.
func ValidLogStore(kind string) bool { return logstore.ValidKind(kind) }

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, 1000*time.Millisecond)
	def(&c.ElectionTimeout, 1000*time.Millisecond)
	def(&c.LeaderLeaseTimeout, c.HeartbeatTimeout/2)
	// While no entry flows, raft's leader sends each follower an empty
	// AppendEntries every CommitTimeout to 2x it, only so that the follower
	// learns the commit index (writes carry it anyway). Raft's own default:
	// at 5ms an idle three-node cluster spent a third of a core on these,
	// and only a follower's stale reads were fresher for it.
	def(&c.CommitTimeout, 50*time.Millisecond)
	def(&c.SnapshotInterval, 30*time.Second)
	def(&c.TickInterval, 250*time.Millisecond)
	def(&c.ApplyTimeout, 5*time.Second)
	def(&c.StateCheckInterval, DefaultStateCheckInterval)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.ReadyMaxLag == 0 {
		c.ReadyMaxLag = DefaultReadyMaxLag
	}
	if c.MaxPendingApplies == 0 {
		c.MaxPendingApplies = 1024
	}
	if c.MaxWaitersPerLock == 0 {
		c.MaxWaitersPerLock = DefaultMaxWaitersPerLock
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = DefaultMaxWaiters
	}
	if c.LogStore == "" {
		c.LogStore = DefaultLogStore
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.AdvertiseRaft == "" {
		c.AdvertiseRaft = c.RaftAddr
	}
	if c.Clock == nil {
		c.Clock = NewSystemClock()
	}
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "raftlock"})
	}
}
