// Package history is the checker's journal: every call a workload client
// makes is written as a "call" line before it is sent and a "ret" line after
// it returns, with CLOCK_MONOTONIC times, so that the journals of separate
// processes merge into one history whose intervals compare.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// Now reads CLOCK_MONOTONIC, which on Linux is one clock for the whole
// system: readings from different processes compare.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// Operation kinds.
const (
	Acquire = "acquire"
	Renew   = "renew"
	Release = "release"
	Update  = "update" // holder changes the lock's value
	Read    = "read"   // linearizable GET of one lock, plain or blocking (?index=&wait_ms=)
	FRead   = "fread"  // fenced register read (carries a token)
	FWrite  = "fwrite" // fenced register write
	URead   = "uread"  // unfenced register read
	UWrite  = "uwrite" // unfenced register write

	// Sessions: Session names the session; a session's Renew
	// journals the TTL it keeps (TTLMs), as a lock renew does.
	SessCreate = "session-create"
	SessRenew  = "session-renew"
	SessClose  = "session-close"
	// Semaphore permits: Name is the semaphore (a namespace apart from
	// locks), Limit the limit asked, Slot the slot answered.
	SemAcquire = "sem-acquire"
	SemRenew   = "sem-renew"
	SemRelease = "sem-release"
	SemRead    = "sem-read" // linearizable GET of a semaphore: Limit, Slots and Tokens of its holders
)

// Shared is the Mode of a shared lock acquire; "" is exclusive.
const Shared = "shared"

// Outcomes.
const (
	OK        = "ok"
	Held      = "held"       // acquire: 409 held
	NotHolder = "not_holder" // renew/release: 409 not_holder
	Free      = "free"       // read: not held
	Rejected  = "rejected"   // fenced register refused a stale token
	Fail      = "fail"       // definitely had no effect (4xx, connection refused)
	Unknown   = "unknown"    // timeout, 5xx (504 unknown_outcome included), 429, broken connection

	NoSession     = "no_session"     // 404 no_session: the session is unknown or ended
	Full          = "full"           // semaphore acquire: 409 full
	LimitMismatch = "limit_mismatch" // semaphore acquire: 409 limit_mismatch
	SessionFull   = "session_full"   // 409 session_full
)

// Entry is one journal line.
type Entry struct {
	Kind   string `json:"k"` // "call" or "ret"
	ID     string `json:"id"`
	Client int    `json:"c"`
	Op     string `json:"op,omitempty"`
	Name   string `json:"name,omitempty"`
	Lease  string `json:"lease,omitempty"`
	TTLMs  int64  `json:"ttl,omitempty"`
	WaitMs int64  `json:"wait,omitempty"` // acquire, blocking read: wait_ms asked for
	// Value: call: the value an acquire or update sends; ret: a read's value.
	Value string `json:"value,omitempty"`
	// Index: call: a blocking read's ?index=; ret: the index a read answered.
	Index   uint64 `json:"index,omitempty"`
	Token   uint64 `json:"token,omitempty"` // call: register token; ret: granted or read token
	Based   int64  `json:"based,omitempty"` // register write: version it was based on
	Time    int64  `json:"t"`               // CLOCK_MONOTONIC ns (Now)
	Outcome string `json:"out,omitempty"`
	Holder  uint64 `json:"holder,omitempty"`  // 409 held: the holder's token
	Version int64  `json:"version,omitempty"` // register: version read or written
	Node    string `json:"node,omitempty"`    // endpoint the call went to
	Status  int    `json:"status,omitempty"`
	Err     string `json:"err,omitempty"`
	// Session: call: the session a lock or permit is acquired with, or the
	// session a session op names; ret of a create: the session id answered.
	Session string `json:"session,omitempty"`
	Mode    string `json:"mode,omitempty"`  // call: lock acquire mode ("shared" or "")
	Limit   int64  `json:"limit,omitempty"` // call: semaphore limit asked; ret: limit answered
	Slot    int    `json:"slot,omitempty"`  // ret: semaphore slot answered
	// Slots and Tokens: ret of a semaphore read, its holders in the order answered.
	Slots  []int    `json:"slots,omitempty"`
	Tokens []uint64 `json:"tokens,omitempty"`
	// Batched: call: sent in a POST /v1/batch with another call.
	Batched bool `json:"batch,omitempty"`
	// RetryAfter is an unknown outcome's Retry-After in seconds; not journalled.
	RetryAfter int `json:"-"`
}

// Journal appends entries to a file, one JSON object a line, each written
// through to the kernel at once so nothing is lost when the process is killed.
type Journal struct {
	mu sync.Mutex
	f  *os.File
}

// Create opens a new journal file.
func Create(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Journal{f: f}, nil
}

// Write appends one entry.
func (j *Journal) Write(e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (j *Journal) Close() error { return j.f.Close() }

// Op is a call paired with its return.
type Op struct {
	ID     string
	Client int
	Kind   string
	Name   string
	Lease  string
	TTLMs  int64
	WaitMs int64 // an acquire's or a blocking read's wait_ms
	Value  string
	// AskIndex is a blocking read's ?index= (WaitMs > 0); Index the index a
	// read answered (0 for a lock never held).
	AskIndex uint64
	Index    uint64
	Token    uint64
	Based    int64
	Call     int64 // CLOCK_MONOTONIC ns
	Return   int64 // CLOCK_MONOTONIC ns; math.MaxInt64 when no return was journalled
	Outcome  string
	Holder   uint64
	Version  int64
	Node     string
	Err      string
	// Session, Mode: as called. Limit is the limit asked, GotLimit the one
	// answered (semaphore OK or limit_mismatch), Slot the slot answered.
	Session  string
	Mode     string
	Limit    int64
	GotLimit int64
	Slot     int
	Slots    []int // semaphore read: the holders' slots and tokens
	Tokens   []uint64
	Batched  bool // sent in a batch
}

// Definite reports whether the op's outcome is known.
func (o Op) Definite() bool { return o.Outcome != Unknown }

func (o Op) String() string {
	s := fmt.Sprintf("%s c%d %s %s", o.ID, o.Client, o.Kind, o.Name)
	if o.Lease != "" {
		s += " lease=" + o.Lease
	}
	s += " -> " + o.Outcome
	if o.Token != 0 {
		s += fmt.Sprintf(" token=%d", o.Token)
	}
	if o.Holder != 0 {
		s += fmt.Sprintf(" holder=%d", o.Holder)
	}
	return s
}

// Parse parses one journal.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// A process killed mid-write leaves a torn last line: skip it.
			continue
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// ReadDir reads every *.jsonl journal in dir.
func ReadDir(dir string) ([]Entry, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var all []Entry
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		es, err := Parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, es...)
	}
	return all, nil
}

// Pair turns entries into operations sorted by call time. A call with no
// return becomes an unknown outcome that never returned.
func Pair(entries []Entry) []Op {
	calls := map[string]Entry{}
	rets := map[string]Entry{}
	for _, e := range entries {
		switch e.Kind {
		case "call":
			calls[e.ID] = e
		case "ret":
			rets[e.ID] = e
		}
	}
	ops := make([]Op, 0, len(calls))
	for id, c := range calls {
		o := Op{ID: id, Client: c.Client, Kind: c.Op, Name: c.Name, Lease: c.Lease, TTLMs: c.TTLMs, WaitMs: c.WaitMs, Batched: c.Batched,
			Token: c.Token, Based: c.Based, Call: c.Time, Return: math.MaxInt64, Outcome: Unknown, Node: c.Node,
			Value: c.Value, AskIndex: c.Index, Session: c.Session, Mode: c.Mode, Limit: c.Limit}
		if r, ok := rets[id]; ok {
			o.Return, o.Outcome, o.Holder, o.Version, o.Err = r.Time, r.Outcome, r.Holder, r.Version, r.Err
			if r.Token != 0 {
				o.Token = r.Token
			}
			o.GotLimit, o.Slot, o.Slots, o.Tokens = r.Limit, r.Slot, r.Slots, r.Tokens
			if o.Session == "" {
				o.Session = r.Session
			}
			if o.Kind == Read {
				o.Value, o.Index = r.Value, r.Index
			}
			if o.Outcome == Unknown {
				o.Return = math.MaxInt64
			}
		}
		ops = append(ops, o)
	}
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].Call != ops[j].Call {
			return ops[i].Call < ops[j].Call
		}
		return ops[i].ID < ops[j].ID
	})
	return ops
}

// Access is one entry of a register's own log, kept by the register server
// in the order it served them.
type Access struct {
	Seq      int    `json:"seq"`
	Fenced   bool   `json:"fenced"`
	Name     string `json:"name"`
	Write    bool   `json:"write"`
	OpID     string `json:"op"`
	Token    uint64 `json:"token"`
	Based    int64  `json:"based,omitempty"` // write: the version the writer read
	Version  int64  `json:"version"`         // version after the access
	Accepted bool   `json:"accepted"`
	// Again marks a holder's second write under one token, which the
	// shipped guard must refuse.
	Again bool `json:"again,omitempty"`
	// Lost names the accepted writes this write overwrote without having
	// read them: lost updates.
	Lost []string `json:"lost,omitempty"`
}
