package raftnode_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// untrustedCases are crafted backups, each with what the API would refuse
// (or what would lower a token) and a word the refusal must name.
func untrustedCases(t testing.TB) map[string]struct {
	file []byte
	want string
} {
	lock := func(name string, l rawLease) []byte {
		s := okState(10)
		s.locks[0].name = name
		s.locks[0].holders[0] = l
		return s.file(t)
	}
	ok := okLease(10)
	with := func(f func(*rawLease)) rawLease { l := ok; f(&l); return l }
	dup := okState(10)
	dup.locks = append(dup.locks, dup.locks[0])
	dupSession := okState(10)
	sess := rawSession{id: "session-crafted-0123456789", owner: "w", ttl: 10_000, dead: 10_000 * 1e6, index: 5}
	dupSession.sessions = []rawSession{sess, sess}
	badSession := okState(10)
	badSession.sessions = []rawSession{{id: "x y<script>", owner: "w", ttl: 10_000, dead: 10_000 * 1e6, index: 5}}
	longSession := okState(10)
	longSession.sessions = []rawSession{{id: "session-crafted-0123456789", owner: "w", ttl: 10_000, dead: 4_600_000_000_000 * 1e6, index: 5}}
	tombAbove := okState(10)
	tombAbove.tombs = []rawLock{{name: "gone", index: 70}}
	floorAbove := okState(10)
	floorAbove.floor = 1 << 40
	type c = struct {
		file []byte
		want string
	}
	return map[string]c{
		"token above the index": {okState(1_000_000_000_000).file(t), "tok/x"},
		"empty name":            {lock("", ok), "name"},
		"name with NUL":         {lock("a\x00b", ok), `a\x00b`},
		"name with ESC":         {lock("\x1b[2Jx", ok), `\x1b[2Jx`},
		"name with newline":     {lock("a\nb", ok), `a\nb`},
		"5005-byte name":        {lock(strings.Repeat("n", 5005), ok), "5005 bytes"},
		"100 KB owner":          {lock("o", with(func(l *rawLease) { l.owner = strings.Repeat("o", 100_000) })), "owner"},
		"short lease id":        {lock("l", with(func(l *rawLease) { l.leaseID = "short" })), "lease_id"},
		"lease id with markup":  {lock("l", with(func(l *rawLease) { l.leaseID = "x y<script>" })), "lease_id"},
		"remaining 4.6e12 ms":   {lock("r", with(func(l *rawLease) { l.dead = 4_600_000_000_000 * 1e6 })), "deadline"},
		"ttl out of range":      {lock("t", with(func(l *rawLease) { l.ttl = 1 << 40 })), "ttl_ms"},
		"lock-delay too long":   {lock("d", with(func(l *rawLease) { l.delay = 1 << 40 })), "lock_delay_ms"},
		"token 0":               {lock("z", with(func(l *rawLease) { l.token = 0 })), "token 0"},
		"value not UTF-8":       {lock("v", with(func(l *rawLease) { l.value = "\xff" })), "value"},
		"duplicate lock":        {dup.file(t), `"tok/x" twice`},
		"duplicate session":     {dupSession.file(t), "twice"},
		"bad session id":        {badSession.file(t), "session_id"},
		"session deadline":      {longSession.file(t), "deadline"},
		"tombstone above index": {tombAbove.file(t), "gone"},
		"floor above index":     {floorAbove.file(t), "floor"},
		"index near 2^64": {func() []byte {
			s := rawState{index: 1<<64 - 5}
			return s.file(t)
		}(), "highest index"},
		"index just above the cap": {func() []byte {
			s := rawState{index: raftnode.MaxBackupIndex + 1}
			return s.file(t)
		}(), "highest index"},
	}
}

// A backup is untrusted input: every record the API would refuse, every
// token above the file's own index, every duplicate, an index near the end
// of raft's range, is refused with the record named.
func TestDecodeBackupRefusesWhatTheAPIWouldRefuse(t *testing.T) {
	if info, _, err := raftnode.ParseBackup(okState(10).file(t)); err != nil || info.Index != 69 || info.Locks != 1 {
		t.Fatalf("a valid crafted file: %+v %v", info, err)
	}
	at := okState(10)
	at.index = raftnode.MaxBackupIndex
	if _, _, err := raftnode.ParseBackup(at.file(t)); err != nil {
		t.Fatalf("a file at the highest index accepted: %v", err)
	}
	for name, tc := range untrustedCases(t) {
		_, _, err := raftnode.ParseBackup(tc.file)
		if !errors.Is(err, raftnode.ErrBadBackup) {
			t.Errorf("%s: err = %v, want ErrBadBackup", name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q does not name %q", name, err, tc.want)
		}
	}
}

// endless is a body of n bytes after prefix, made as it is read; read
// counts what the reader took.
type endless struct {
	prefix []byte
	n      int64
	read   atomic.Int64
}

func (e *endless) Read(p []byte) (int, error) {
	off := e.read.Load()
	if off >= e.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), e.n-off)]
	for i := range p {
		if o := off + int64(i); o < int64(len(e.prefix)) {
			p[i] = e.prefix[o]
		} else {
			p[i] = 0
		}
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

// The leader checks a restore's header before it reads the body on: a
// large body with the right magic and a bad header is refused having read
// no more than a few buffers of it, and one whose header is right but whose
// state is garbage is refused as soon as the garbage is read.
func TestRestoreChecksTheHeaderBeforeReadingTheBody(t *testing.T) {
	c := testenv.Start(t, 1)
	leader := c.Leader()
	const size = 64 << 20
	zeros := &endless{prefix: []byte("RAFTLOCK-BACKUP\n"), n: size} // version 0
	huge := binary.BigEndian.AppendUint32([]byte("RAFTLOCK-BACKUP\n"), 1)
	huge = binary.BigEndian.AppendUint64(huge, 69)
	huge = binary.BigEndian.AppendUint64(huge, 1)
	huge = binary.BigEndian.AppendUint64(huge, size-76)
	huge = append(huge, "RAFTLOCK-SNAP\x03"...)
	garbage := &endless{prefix: huge, n: size} // a clock, then no locks, nodes, ... : zeros decode as an empty state until the end
	for name, body := range map[string]*endless{"version 0": zeros, "right header": garbage} {
		req, err := http.NewRequestWithContext(testenv.Context(t, time.Minute), "POST", leader.URL()+"/v1/snapshot", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := c.HTTPClient().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode != 400 {
			t.Fatalf("%s: status %d, want 400", name, resp.StatusCode)
		}
		if got := body.read.Load(); got > 4<<20 {
			t.Errorf("%s: the leader read %d bytes of a refused %d-byte body", name, got, int64(size))
		}
	}
	if _, ok := leader.Machine().Get("tok/x"); ok {
		t.Fatal("a refused restore changed the state")
	}
}

// The decoder reads a valid file in one pass from a stream, the same as
// from memory.
func TestDecodeBackupStreams(t *testing.T) {
	file := okState(10).file(t)
	info, m, err := raftnode.DecodeBackup(io.MultiReader(bytes.NewReader(file[:30]), bytes.NewReader(file[30:])))
	if err != nil || info.Index != 69 || info.Size != int64(len(file)) {
		t.Fatalf("%+v %v", info, err)
	}
	if l, ok := m.Get("tok/x"); !ok || l.Token != 10 {
		t.Fatalf("decoded state: %+v %v", l, ok)
	}
}
