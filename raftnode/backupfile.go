package raftnode

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/raftlock/raftlock/fsm"
)

// A backup file is
//
//	magic "RAFTLOCK-BACKUP\n" | version u32 | index u64 | term u64 | fsm length u64 |
//	fsm snapshot (fsm's "RAFTLOCK-SNAP" encoding) | SHA-256 of everything before it
//
// integers big-endian. Index and term are those of the last command the
// snapshot holds. The trailer lets a restore refuse a damaged file before
// anything reaches Raft: a user restore that the FSM then fails to read
// panics every node.
const (
	backupMagic   = "RAFTLOCK-BACKUP\n"
	backupVersion = 1
	backupHeader  = len(backupMagic) + 4 + 8 + 8 + 8
	// MaxBackupSize bounds a backup file a node will read (and the HTTP
	// body of a restore).
	MaxBackupSize = 1 << 30
	// MaxBackupIndex is the highest index a backup may carry: 2^53, the
	// largest integer a JSON number holds exactly in every client
	// (JavaScript's doubles), and fencing tokens are indexes. A restore
	// moves the cluster's log to the backup's index, where raft and the log
	// stores add to it (hashicorp/raft v1.7.3 panics "log not found" at
	// every start of a node whose restored index is near 2^64); 2^53 leaves
	// 2^11 times its own range of headroom below that, and at a million
	// entries a second a log needs 285 years to reach it.
	MaxBackupIndex = 1 << 53
)

// ErrBadBackup is returned for a file that is not a whole, intact backup.
// Its BadInput method tells the HTTP layer (which may not import raftnode)
// to answer 400.
var ErrBadBackup error = badBackupError{}

type badBackupError struct{}

func (badBackupError) Error() string  { return "not a valid raftlock backup" }
func (badBackupError) BadInput() bool { return true }

// BackupInfo describes a backup file.
type BackupInfo struct {
	Index   uint64 // Raft index of the last command in the snapshot
	Term    uint64 // its term
	Locks   int    // leases held (not counting locks in their lock-delay)
	FSMSize int64  // bytes of the fsm snapshot
	Size    int64  // bytes of the whole file
	SHA256  [sha256.Size]byte
	// ClusterID is the id of the cluster the backup was taken from; "" for
	// a backup taken before clusters had ids.
	ClusterID string
}

// WriteBackup writes a backup file holding the fsm snapshot snap.
func WriteBackup(w io.Writer, index, term uint64, snap []byte) (int64, error) {
	buf := make([]byte, 0, backupHeader+len(snap)+sha256.Size)
	buf = append(buf, backupMagic...)
	buf = binary.BigEndian.AppendUint32(buf, backupVersion)
	buf = binary.BigEndian.AppendUint64(buf, index)
	buf = binary.BigEndian.AppendUint64(buf, term)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(snap)))
	buf = append(buf, snap...)
	sum := sha256.Sum256(buf)
	buf = append(buf, sum[:]...)
	n, err := w.Write(buf)
	if err != nil {
		return int64(n), fmt.Errorf("write backup: %w", err)
	}
	return int64(n), nil
}

// DecodeBackup reads a backup file from r and checks it whole (at most
// MaxBackupSize bytes), in one pass with bounded buffers: the header first
// (magic, version, an index within MaxBackupIndex, a length within
// MaxBackupSize), before any more is read; then the fsm snapshot, decoded
// as it streams through the checksum, so the file is never held in memory,
// only the state it decodes to; the trailer; and last every record against
// the API's rules (checkBackupState). It returns the decoded state.
func DecodeBackup(r io.Reader) (BackupInfo, *fsm.Machine, error) {
	bad := func(format string, args ...any) (BackupInfo, *fsm.Machine, error) {
		return BackupInfo{}, nil, fmt.Errorf("%w: "+format, append([]any{ErrBadBackup}, args...)...)
	}
	var head [backupHeader]byte
	if n, err := io.ReadFull(r, head[:len(backupMagic)]); err != nil || string(head[:n]) != backupMagic {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return BackupInfo{}, nil, fmt.Errorf("read backup: %w", err)
		}
		return bad("wrong magic (not a file written by raftlock snapshot save)")
	}
	if n, err := io.ReadFull(r, head[len(backupMagic):]); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return BackupInfo{}, nil, fmt.Errorf("read backup: %w", err)
		}
		return bad("truncated: %d bytes", len(backupMagic)+n)
	}
	be := binary.BigEndian
	h := head[len(backupMagic):]
	if v := be.Uint32(h); v != backupVersion {
		return bad("format version %d, this raftlock reads %d", v, backupVersion)
	}
	info := BackupInfo{Index: be.Uint64(h[4:]), Term: be.Uint64(h[12:])}
	fsmLen := be.Uint64(h[20:])
	if info.Index > MaxBackupIndex {
		return bad("header index %d is above %d, the highest index a restore accepts", info.Index, uint64(MaxBackupIndex))
	}
	if fsmLen > uint64(MaxBackupSize-backupHeader-sha256.Size) {
		return bad("header says %d snapshot bytes, over the %d-byte limit of a backup file", fsmLen, MaxBackupSize)
	}
	sum := sha256.New()
	sum.Write(head[:])
	body := &countingReader{r: io.LimitReader(r, int64(fsmLen))}
	// fsm.Restore reads through this very bufio.Reader (it takes one as
	// is), so what it leaves unread is known: nothing may be.
	br := bufio.NewReaderSize(io.TeeReader(body, sum), 64<<10)
	m := fsm.New()
	if err := m.Restore(br); err != nil {
		if body.err != nil && !errors.Is(body.err, io.EOF) {
			return BackupInfo{}, nil, fmt.Errorf("read backup: %w", body.err)
		}
		if body.n < int64(fsmLen) && errors.Is(body.err, io.EOF) {
			return bad("truncated: header says %d snapshot bytes, file has %d", fsmLen, body.n)
		}
		return bad("%v", err)
	}
	if _, err := br.ReadByte(); err == nil {
		return bad("bytes after the end of the state, within the %d the header gives", fsmLen)
	} else if !errors.Is(err, io.EOF) {
		return BackupInfo{}, nil, fmt.Errorf("read backup: %w", err)
	}
	if body.n != int64(fsmLen) {
		return bad("truncated: header says %d snapshot bytes, file has %d", fsmLen, body.n)
	}
	var trailer [sha256.Size]byte
	if _, err := io.ReadFull(r, trailer[:]); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return BackupInfo{}, nil, fmt.Errorf("read backup: %w", err)
		}
		return bad("truncated: no whole checksum after the snapshot")
	}
	copy(info.SHA256[:], sum.Sum(nil))
	if info.SHA256 != trailer {
		return bad("checksum mismatch: the file is damaged")
	}
	var more [1]byte
	if n, err := io.ReadFull(r, more[:]); n > 0 {
		return bad("padded: bytes after the checksum")
	} else if err != nil && !errors.Is(err, io.EOF) {
		return BackupInfo{}, nil, fmt.Errorf("read backup: %w", err)
	}
	if c := m.Clock(); c.Index != info.Index {
		return bad("header index %d but the snapshot holds index %d", info.Index, c.Index)
	}
	if err := checkBackupState(info, m); err != nil {
		return bad("%v", err)
	}
	info.FSMSize = int64(fsmLen)
	info.Size = int64(backupHeader) + int64(fsmLen) + sha256.Size
	info.Locks = m.HeldCount()
	info.ClusterID = m.ClusterID()
	return info, m, nil
}

// ParseBackup checks a backup file held in memory (see DecodeBackup) and
// returns its fsm snapshot's bytes.
func ParseBackup(data []byte) (BackupInfo, []byte, error) {
	info, _, err := DecodeBackup(bytes.NewReader(data))
	if err != nil {
		return BackupInfo{}, nil, err
	}
	return info, data[backupHeader : len(data)-sha256.Size], nil
}

type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}
