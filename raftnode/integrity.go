package raftnode

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// Integrity of the log and of the replicated state (see DESIGN.md,
// "Integrity"). Every command this version writes carries, in raft's
// Log.Extensions, a CRC-32C of its payload: raft-boltdb stores Extensions and
// the transport carries them, and versions that predate this ignore them. A
// replica verifies the checksum before applying and stops on a mismatch.
//
// The same extension lets the leader ask every replica to hash its state at
// one index ("mark") and later tell them its own hash for that index
// ("check"): a replica whose hash differs flags itself as diverged.

// DefaultStateCheckInterval is how often a leader runs a state check.
const DefaultStateCheckInterval = 5 * time.Minute

// Extension layout, format 1:
//
//	[0]     extFormat
//	[1:5]   CRC-32C (Castagnoli), big endian, of Data followed by ext[5:]
//	[5]     flags
//	[6:14]  with flagCheck: the marked index, big endian
//	[14:46] with flagCheck: the leader's SHA-256 state hash at that index
//
// The checksum covers the flags and the check too, so a damaged check can
// not flag a healthy replica.
const (
	extFormat    = 0xC1
	extHeader    = 6
	extCheckSize = extHeader + 8 + sha256.Size

	flagMark  = 1 << 0 // every replica hashes its state after this entry
	flagCheck = 1 << 1 // carries (index, leader's hash) of an earlier mark
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// extension is the decoded raftlock extension of one entry.
type extension struct {
	flags byte
	index uint64 // flagCheck: the marked index
	hash  [sha256.Size]byte
}

// encodeExtension returns the extension for an entry with payload data.
func encodeExtension(data []byte, x extension) []byte {
	ext := make([]byte, extHeader, extCheckSize)
	ext[0], ext[5] = extFormat, x.flags
	if x.flags&flagCheck != 0 {
		ext = binary.BigEndian.AppendUint64(ext, x.index)
		ext = append(ext, x.hash[:]...)
	}
	crc := crc32.Update(crc32.Checksum(data, castagnoli), castagnoli, ext[5:])
	binary.BigEndian.PutUint32(ext[1:5], crc)
	return ext
}

// errCorrupt: the entry's payload or extension does not match its checksum.
var errCorrupt = errors.New("checksum mismatch")

// errUnknownExtension: written by a newer version with another layout.
var errUnknownExtension = errors.New("unknown extension format")

// decodeExtension verifies an entry. An entry without extension (written by
// an older version) decodes to the zero extension and ok=false: nothing to
// verify, as before.
func decodeExtension(data, ext []byte) (x extension, ok bool, err error) {
	if len(ext) == 0 {
		return extension{}, false, nil
	}
	if ext[0] != extFormat {
		return extension{}, false, fmt.Errorf("%w %#x", errUnknownExtension, ext[0])
	}
	if len(ext) < extHeader {
		return extension{}, false, fmt.Errorf("%w: extension of %d bytes", errCorrupt, len(ext))
	}
	want := binary.BigEndian.Uint32(ext[1:5])
	if got := crc32.Update(crc32.Checksum(data, castagnoli), castagnoli, ext[5:]); got != want {
		return extension{}, false, fmt.Errorf("%w: crc32c %08x, recorded %08x", errCorrupt, got, want)
	}
	x.flags = ext[5]
	if x.flags&flagCheck != 0 {
		if len(ext) < extCheckSize {
			return extension{}, false, fmt.Errorf("%w: check of %d bytes", errCorrupt, len(ext))
		}
		x.index = binary.BigEndian.Uint64(ext[6:14])
		copy(x.hash[:], ext[14:extCheckSize])
	}
	return x, true, nil
}

// stateHash is SHA-256 of the state that decides every answer, in the
// snapshot's deterministic encoding (equal states write equal bytes),
// without the watch bookkeeping replicas may legitimately disagree on after
// an upgrade (fsm.Snapshot.WriteOutcomeStateTo).
func stateHash(s *fsm.Snapshot) ([sha256.Size]byte, error) {
	h := sha256.New()
	if _, err := s.WriteOutcomeStateTo(h); err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("hash state: %w", err)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// integrity is a replica's record of state hashes at marked indexes and of
// the outcome of checks. Its zero value is ready to use.
type integrity struct {
	mu    sync.Mutex
	marks map[uint64]*mark
	order []uint64 // marked indexes, oldest first, at most keepMarks

	diverged atomic.Uint64 // index whose hash differed from the leader's; 0: none
	checked  atomic.Uint64 // last marked index whose hash matched the leader's
	log      atomic.Pointer[hclog.Logger]

	// unconfirmedRestore and unconfirmedTerm are the raft index and term
	// (R, T) of a backup restore this node's state may rest on whose commit
	// it has not seen (R 0: none); see "unconfirmed" in backup.go. Written
	// under unconfirmedMu, together with the data dir's record.
	unconfirmedRestore atomic.Uint64
	unconfirmedTerm    atomic.Uint64
	unconfirmedMu      sync.Mutex
	unconfirmedLoad    sync.Once // reads the data dir's record (backup.go)
}

// keepMarks bounds the hashes kept while their check is on its way.
const keepMarks = 8

// mark is one replica's state hash at a marked index, computed off the FSM
// goroutine from a copy taken when the entry applied.
type mark struct {
	done chan struct{}
	sum  [sha256.Size]byte
	err  error
	want *[sha256.Size]byte // the leader's hash, if its check came first
}

func (g *integrity) logger() hclog.Logger {
	if l := g.log.Load(); l != nil {
		return *l
	}
	return hclog.Default()
}

// markAt records the state as of index (on the FSM goroutine, right after
// applying it) and hashes it in the background: a copy costs far less than
// encoding and hashing, which would hold up every later entry.
func (g *integrity) markAt(index uint64, s *fsm.Snapshot) {
	mk := &mark{done: make(chan struct{})}
	g.mu.Lock()
	if g.marks == nil {
		g.marks = make(map[uint64]*mark)
	}
	if _, ok := g.marks[index]; ok {
		g.mu.Unlock() // applied again after a restore: the hash stands
		return
	}
	g.marks[index] = mk
	g.order = append(g.order, index)
	if len(g.order) > keepMarks {
		delete(g.marks, g.order[0])
		g.order = g.order[1:]
	}
	g.mu.Unlock()
	go func() {
		mk.sum, mk.err = stateHash(s)
		close(mk.done)
		g.mu.Lock()
		want := mk.want
		g.mu.Unlock()
		if want != nil {
			g.compare(index, mk, *want)
		}
	}()
}

// checkAt compares the leader's hash for index with ours, now or when ours
// is ready. A replica that holds no hash for index (it restored a snapshot
// taken after the mark) has nothing to compare.
func (g *integrity) checkAt(index uint64, want [sha256.Size]byte) {
	g.mu.Lock()
	mk, ok := g.marks[index]
	if !ok {
		g.mu.Unlock()
		g.logger().Debug("state check for an index this node did not hash", "index", index)
		return
	}
	select {
	case <-mk.done:
		g.mu.Unlock()
		g.compare(index, mk, want)
	default:
		mk.want = &want
		g.mu.Unlock()
	}
}

func (g *integrity) compare(index uint64, mk *mark, want [sha256.Size]byte) {
	switch {
	case mk.err != nil:
		g.logger().Error("cannot hash state for a state check", "index", index, "error", mk.err)
	case mk.sum == want:
		if index > g.checked.Load() {
			g.checked.Store(index)
		}
	default:
		g.diverged.CompareAndSwap(0, index)
		g.logger().Error("state diverged from the leader's: this node serves no reads and takes no leadership until an operator acts",
			"index", index, "hash", fmt.Sprintf("%x", mk.sum[:8]), "leader_hash", fmt.Sprintf("%x", want[:8]),
			"action", "stop this node, move its data dir aside and let it rejoin from a snapshot")
	}
}

// hashAt waits for this replica's hash at a marked index.
func (g *integrity) hashAt(ctx context.Context, index uint64) ([sha256.Size]byte, error) {
	g.mu.Lock()
	mk, ok := g.marks[index]
	g.mu.Unlock()
	if !ok {
		return [sha256.Size]byte{}, fmt.Errorf("no state hash at index %d", index)
	}
	select {
	case <-mk.done:
		return mk.sum, mk.err
	case <-ctx.Done():
		return [sha256.Size]byte{}, fmt.Errorf("wait for state hash at %d: %w", index, ctx.Err())
	}
}

// verifyEntry checks a command entry before it is applied and records
// marks and checks. It panics on a damaged entry: applying it would serve a
// state no other replica has (a lock name changed on disk was
// served as held, and the real lock granted twice).
func (f *raftFSM) verifyEntry(l *raft.Log) (extension, bool) {
	x, ok, err := decodeExtension(l.Data, l.Extensions)
	if errors.Is(err, errUnknownExtension) {
		panic(fmt.Sprintf("raftnode: committed entry %d carries an extension this version does not know (%v); upgrade this node", l.Index, err))
	}
	if err != nil {
		panic(fmt.Sprintf("raftnode: committed entry %d is corrupt (%v): this node's log on disk is damaged; stop it, move its data dir aside and let it rejoin from a snapshot", l.Index, err))
	}
	return x, ok
}

// afterApply acts on an applied entry's extension.
func (f *raftFSM) afterApply(index uint64, x extension) {
	if x.flags&flagMark != 0 {
		f.integrity.markAt(index, f.m.Snapshot())
	}
	if x.flags&flagCheck != 0 {
		f.integrity.checkAt(x.index, x.hash)
	}
}

// Diverged reports whether this node's state differed from the leader's at
// a state check, and at which index. It stays set until the process stops.
func (n *Node) Diverged() (index uint64, ok bool) {
	i := n.fsm.integrity.diverged.Load()
	return i, i != 0
}

// StateCheckedAt returns the last marked index at which this node's state
// hash matched the leader's (0: none yet).
func (n *Node) StateCheckedAt() uint64 { return n.fsm.integrity.checked.Load() }

// CheckState runs one state check from this leader: it writes a tick that
// every replica hashes its state after, waits for its own hash, and writes
// a tick carrying that hash for the replicas to compare. It returns the
// marked index. Replicas compare as they apply the second entry.
func (n *Node) CheckState(ctx context.Context) (uint64, error) {
	if !n.IsLeader() {
		return 0, ErrNotLeader
	}
	_, index, err := n.applyExt(fsm.Command{Op: fsm.OpTick}, extension{flags: flagMark})
	if err != nil {
		return 0, fmt.Errorf("state check mark: %w", err)
	}
	sum, err := n.fsm.integrity.hashAt(ctx, index)
	if err != nil {
		return 0, err
	}
	if _, _, err := n.applyExt(fsm.Command{Op: fsm.OpTick}, extension{flags: flagCheck, index: index, hash: sum}); err != nil {
		return 0, fmt.Errorf("state check at %d: %w", index, err)
	}
	return index, nil
}

// watchIntegrity runs state checks every interval while this node leads
// (interval < 0: never), and hands leadership away at once if this node
// has diverged: its state must not answer anyone. A leader also sees here to
// a follower that can take no entry until it gets a snapshot.
func (n *Node) watchIntegrity(interval time.Duration) {
	defer n.wg.Done()
	log := n.log.Named("integrity")
	n.fsm.integrity.log.Store(&log)
	// The transport holds every RPC back until this: the data dir's record
	// of an unconfirmed restore must be read, and its checks in place,
	// before raft gets a single entry or snapshot (backup.go).
	n.unconfirmedPair()
	n.transport.setScreens(n.screenAppend, n.screenSnapshot)
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	var next time.Time
	if interval > 0 {
		next = time.Now().Add(interval)
	}
	for {
		select {
		case <-n.stop:
			return
		case <-poll.C:
		case <-n.transport.unreadableCh:
		}
		if !n.IsLeader() {
			n.transport.takeRefused() // drops refusals an earlier leadership saw
			continue
		}
		if index, bad := n.Diverged(); bad {
			log.Error("diverged node won leadership; transferring it away", "diverged_at", index)
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				log.Warn("leadership transfer away from a diverged node failed", "error", err)
			}
			continue
		}
		n.compactPastRefused() // a follower that needs a snapshot to go on (backup.go)
		if next.IsZero() || time.Now().Before(next) || n.readyTerm.Load() != n.raft.CurrentTerm() {
			continue
		}
		next = time.Now().Add(interval)
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout+time.Minute)
		if index, err := n.CheckState(ctx); err != nil {
			log.Warn("state check failed", "error", err)
		} else {
			log.Debug("state check written", "index", index)
		}
		cancel()
	}
}
