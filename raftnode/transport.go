package raftnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// handshakeTimeout bounds a TLS handshake on the Raft port, so that a peer
// that connects and says nothing holds no goroutine for long.
const handshakeTimeout = 10 * time.Second

// streamLayer carries Raft traffic over a listener the caller may have bound
// already (tests bind every port before any node starts, so no outbound
// connection can take a port meant for a node). With tls set, every
// connection is mutual TLS in both directions (tlsconfig.Bundle.Peer).
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	tls       *tls.Config
	dial      func(ctx context.Context, addr string) (net.Conn, error) // nil: TCP
}

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil || s.tls == nil {
		return c, err
	}
	// The handshake runs on the transport's per-connection goroutine (first
	// Read), not here: one slow or hostile peer must not stall Accept.
	return &serverConn{Conn: tls.Server(c, s.tls)}, nil
}

func (s *streamLayer) Close() error   { return s.ln.Close() }
func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dial := s.dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if s.tls == nil {
		return dial(ctx, string(addr))
	}
	host, _, err := net.SplitHostPort(string(addr))
	if err != nil {
		return nil, err
	}
	cfg := s.tls.Clone()
	cfg.ServerName = host
	raw, err := dial(ctx, string(addr))
	if err != nil {
		return nil, err
	}
	// Handshake here, so that a peer that is not ours (plaintext, or a
	// certificate from another CA) fails the dial instead of a later RPC.
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}

// serverConn is an accepted TLS connection whose handshake, on first Read,
// has a deadline.
type serverConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *serverConn) Read(p []byte) (int, error) {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		if c.err = c.Conn.HandshakeContext(ctx); c.err != nil {
			c.Conn.Close()
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

// watchedTransport is the network transport with one more step between it
// and raft: it notes the highest commit index a leader has told this node
// (AppendEntries) or implied (InstallSnapshot), which a follower's own commit
// index cannot show: raft caps that at the follower's last log entry, so a
// follower far behind looks caught up after every batch. Heartbeats take
// raft's fast path and skip this; they carry no commit index.
type watchedTransport struct {
	*raft.NetworkTransport
	ch           chan raft.RPC
	done         chan struct{}
	closeOnce    sync.Once
	leaderCommit atomic.Uint64
	onAppend     func(*raft.AppendEntriesRequest)

	// refused holds, per follower, the last index of the latest batch it
	// refused though its log reaches that far (none since last taken); see
	// AppendEntries. unreadableCh wakes the leader's watch (integrity.go).
	refusedMu    sync.Mutex
	refused      map[raft.ServerID]uint64
	unreadableCh chan struct{}
	// The last compaction for any follower, and for each
	// (compactPastRefused; watchIntegrity's goroutine only).
	compactedAt  time.Time
	compactedFor map[raft.ServerID]time.Time

	// The node's checks of what reaches raft (unconfirmed.go screenAppend,
	// screenSnapshot), set once by setScreens, which forward waits for.
	screensSet     chan struct{}
	screenAppend   func(*raft.AppendEntriesRequest) *raft.AppendEntriesResponse
	screenSnapshot func(*raft.InstallSnapshotRequest, bool) (func(bool), error)
	screensOnce    sync.Once

	// The highest commit index a leader told in an AppendEntries of
	// commitTerm, the latest term seen (forward's goroutine only).
	commitTerm, commitIndex uint64

	// ahead, when set (before raft starts), answers raft's AppendEntries
	// from an early send of the same entries (sendahead.go).
	ahead *sendAhead
}

func watchTransport(t *raft.NetworkTransport, onAppend func(*raft.AppendEntriesRequest)) *watchedTransport {
	w := &watchedTransport{NetworkTransport: t, ch: make(chan raft.RPC), done: make(chan struct{}), onAppend: onAppend,
		unreadableCh: make(chan struct{}, 1), refused: map[raft.ServerID]uint64{}, compactedFor: map[raft.ServerID]time.Time{},
		screensSet: make(chan struct{})}
	go w.forward()
	return w
}

// setScreens installs the node's checks and lets RPCs through to raft.
func (w *watchedTransport) setScreens(appendEntries func(*raft.AppendEntriesRequest) *raft.AppendEntriesResponse,
	snapshot func(*raft.InstallSnapshotRequest, bool) (func(bool), error)) {
	w.screensOnce.Do(func() {
		w.screenAppend, w.screenSnapshot = appendEntries, snapshot
		close(w.screensSet)
	})
}

// takeRefused returns the refusals noted since it was last called and
// forgets them.
func (w *watchedTransport) takeRefused() map[raft.ServerID]uint64 {
	w.refusedMu.Lock()
	defer w.refusedMu.Unlock()
	out := w.refused
	w.refused = map[raft.ServerID]uint64{}
	return out
}

// keepRefused notes again refusals takeRefused returned that are not dealt
// with yet.
func (w *watchedTransport) keepRefused(m map[raft.ServerID]uint64) {
	w.refusedMu.Lock()
	defer w.refusedMu.Unlock()
	for id, last := range m {
		w.refused[id] = max(w.refused[id], last)
	}
}

// AppendEntries is the network transport's, as raft's leader sends it. It
// notes a follower that passed the consistency check but refused entries at
// or below its own last index: hashicorp/raft (v1.7.3) answers so when it
// cannot read one of its own entries there ("failed to get log entry",
// raft.go appendEntries), as after a backup restore it installed as leader
// and never committed (raft.go restoreUserSnapshot leaves a hole at the
// restore's index, and on a WAL removes the whole log below it). The leader
// then walks its nextIndex back one entry per refusal and resends from
// there, forever: it sends a snapshot only once its own log no longer holds
// the entries it would send (replication.go replicateTo, setupAppendEntries).
// A follower whose state rests on a backup restore its cluster may not have
// committed answers the same way, from its own transport (forward, backup.go
// screenAppend), to a batch that starts below the restore. The leader's watch
// compacts its log past that batch (compactPastRefused, per follower),
// so that the snapshot goes out and the follower's state is the cluster's
// again. A refused consistency check (NoRetryBackoff), a stale term and a
// refused append past the follower's last index (a failing disk) are not
// noted: nothing a snapshot would fix. Pipelined replication is off
// (newTransport), so every batch and its answer pass through here.
func (w *watchedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	var err error
	if w.ahead != nil && len(args.Entries) > 0 {
		err = w.ahead.replicate(w.NetworkTransport, id, target, args, resp)
	} else {
		err = w.NetworkTransport.AppendEntries(id, target, args, resp)
	}
	if err != nil {
		return err
	}
	if !resp.Success && !resp.NoRetryBackoff && resp.Term == args.Term && len(args.Entries) > 0 && args.Entries[0].Index <= resp.LastLog {
		w.keepRefused(map[raft.ServerID]uint64{id: args.Entries[len(args.Entries)-1].Index})
		select {
		case w.unreadableCh <- struct{}{}:
		default:
		}
	}
	return nil
}

func (w *watchedTransport) Consumer() <-chan raft.RPC { return w.ch }

func (w *watchedTransport) Close() error {
	w.closeOnce.Do(func() { close(w.done) })
	return w.NetworkTransport.Close()
}

// forward passes RPCs to raft, once the node's checks are in (setScreens). It
// notes the leader's commit index, and lets the node refuse what would put
// the cluster's entries on top of a state resting on a backup restore the
// cluster has not committed (backup.go): an AppendEntries the node answers
// itself never reaches raft; a snapshot reaching past the commit the
// leader told in its term is recorded before raft installs it.
func (w *watchedTransport) forward() {
	select {
	case <-w.screensSet:
	case <-w.done:
		return
	}
	in := w.NetworkTransport.Consumer()
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-w.done:
			return
		}
		switch req := rpc.Command.(type) {
		case *raft.AppendEntriesRequest:
			if w.onAppend != nil {
				w.onAppend(req)
			}
			w.noteCommit(req.LeaderCommitIndex)
			if req.Term > w.commitTerm {
				w.commitTerm, w.commitIndex = req.Term, 0
			}
			if req.Term == w.commitTerm {
				w.commitIndex = max(w.commitIndex, req.LeaderCommitIndex)
			}
			if resp := w.screenAppend(req); resp != nil {
				rpc.Respond(resp, nil)
				continue
			}
		case *raft.InstallSnapshotRequest:
			// A snapshot of committed state is at or below the commit its
			// leader told; hashicorp/raft may send one before any
			// AppendEntries of the term (replicateTo jumps to SEND_SNAP),
			// and the node is then unconfirmed until the next one.
			pastCommit := req.Term != w.commitTerm || req.LastLogIndex > w.commitIndex
			after, err := w.screenSnapshot(req, pastCommit)
			if err != nil {
				_, _ = io.Copy(io.Discard, rpc.Reader) // the stream goes on after it
				rpc.Respond(nil, err)
				continue
			}
			if !pastCommit {
				w.noteCommit(req.LastLogIndex)
			}
			if after != nil {
				rpc = w.onAnswer(rpc, func(resp raft.RPCResponse) {
					r, ok := resp.Response.(*raft.InstallSnapshotResponse)
					after(resp.Error == nil && ok && r.Success)
				})
			}
		}
		select {
		case w.ch <- rpc:
		case <-w.done:
			return // the sender's handler gives up on its own shutdown
		}
	}
}

// onAnswer returns rpc with its answer seen by f before it goes back to the
// sender. The network transport's answer channel holds one, so the send does
// not block.
func (w *watchedTransport) onAnswer(rpc raft.RPC, f func(raft.RPCResponse)) raft.RPC {
	orig := rpc.RespChan
	ch := make(chan raft.RPCResponse, 1)
	rpc.RespChan = ch
	go func() {
		select {
		case resp := <-ch:
			f(resp)
			orig <- resp
		case <-w.done:
		}
	}()
	return rpc
}

func (w *watchedTransport) noteCommit(index uint64) {
	for {
		cur := w.leaderCommit.Load()
		if index <= cur || w.leaderCommit.CompareAndSwap(cur, index) {
			return
		}
	}
}

// newTransport builds the Raft transport on cfg.RaftListener, or on a new
// listener at cfg.RaftAddr.
func newTransport(cfg Config) (*raft.NetworkTransport, error) {
	advertise, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseRaft)
	if err != nil {
		return nil, fmt.Errorf("advertise raft address %q: %w", cfg.AdvertiseRaft, err)
	}
	if advertise.IP == nil || advertise.IP.IsUnspecified() {
		return nil, fmt.Errorf("advertise raft address %q is not dialable", cfg.AdvertiseRaft)
	}
	ln := cfg.RaftListener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return nil, fmt.Errorf("raft address %s: %w", cfg.RaftAddr, err)
		}
	}
	stream := newStreamLayer(ln, advertise, cfg.RaftTLS)
	stream.dial = cfg.RaftDial
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: 3,
		// 1 turns pipelined replication off. With pipelining (the default,
		// 2 in flight) a follower's Success=false can leave the leader's
		// replication goroutine parked for good (the pipeline's channels are
		// unbuffered), and raft.Shutdown then never returns: seen here as a
		// 14-minute hang in a membership test, described in
		// grafana/pyroscope#5518. hashicorp/raft's own measurements (#541)
		// found pipelining of little benefit with batching.
		MaxRPCsInFlight: 1,
		Timeout:         10 * time.Second,
		Logger:          cfg.Logger.Named("transport"),
	}), nil
}

// newEarlyTransport is the outbound-only transport of the leader's early
// sends (sendahead.go): it dials peers as newTransport's does (TLS, the
// test's dialer) and accepts nothing, and timeout bounds each RPC.
func newEarlyTransport(cfg Config, timeout time.Duration) (*raft.NetworkTransport, error) {
	advertise, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseRaft)
	if err != nil {
		return nil, fmt.Errorf("advertise raft address %q: %w", cfg.AdvertiseRaft, err)
	}
	stream := newStreamLayer(nil, advertise, cfg.RaftTLS)
	stream.dial = cfg.RaftDial
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          &dialOnly{streamLayer: stream, closed: make(chan struct{})},
		MaxPool:         2,
		MaxRPCsInFlight: 1,
		Timeout:         timeout,
		Logger:          cfg.Logger.Named("transport.early"),
	}), nil
}

// dialOnly is a stream layer that dials and never accepts.
type dialOnly struct {
	*streamLayer
	closed chan struct{}
	once   sync.Once
}

func (d *dialOnly) Accept() (net.Conn, error) {
	<-d.closed
	return nil, net.ErrClosed
}

func (d *dialOnly) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

func newStreamLayer(ln net.Listener, advertise net.Addr, cfg *tls.Config) *streamLayer {
	if cfg != nil {
		cfg = cfg.Clone()
	}
	return &streamLayer{ln: ln, advertise: advertise, tls: cfg}
}
