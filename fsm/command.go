package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Op names what a log entry asks the state machine to do.
type Op uint8

// The operations of the lock state machine. Values are part of the log format:
// never renumber them.
const (
	OpAcquire    Op = 1 // take a lock, or refresh it when the same lease holds it
	OpRenew      Op = 2 // push a held lease's deadline
	OpRelease    Op = 3 // free a lock held by the lease
	OpTick       Op = 4 // advance the clock only; expiries happen on every entry
	OpSetNode    Op = 5 // record a node's HTTP address (membership metadata)
	OpRemoveNode Op = 6 // forget a node's HTTP address
	// OpForceRelease ends whatever lease holds a lock, as an expiry does
	// (its lock-delay starts). Valid only in a version 3 command: builds
	// that read up to version 2 do not know it (DESIGN.md, "Force release").
	OpForceRelease Op = 7
	// OpUpdate replaces the value of a lock its lease holds (the token
	// stays). Valid only in a version 4 command, like Command.Value.
	OpUpdate Op = 8
	// Sessions, semaphores and shared locks: valid only in a
	// version 5 command (DESIGN.md, "Sessions", "Semaphores").
	OpSessionCreate Op = 9  // SessionID, Owner, TTL, LockDelay; idempotent on SessionID
	OpSessionRenew  Op = 10 // SessionID; TTL 0 keeps the session's TTL
	OpSessionClose  Op = 11 // SessionID: ends every lease of the session, no lock-delay
	OpSemAcquire    Op = 12 // Name, Limit, Owner, LeaseID, TTL or SessionID
	OpSemRenew      Op = 13 // Name, LeaseID, TTL (0 keeps)
	OpSemRelease    Op = 14 // Name, LeaseID
)

// Mode is how a lock is held: exclusively (the default, one holder) or
// shared (any number of shared holders, no exclusive one).
type Mode uint8

// Lock modes. Values are part of the log format.
const (
	ModeExclusive Mode = 0
	ModeShared    Mode = 1
)

func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "exclusive"
	case ModeShared:
		return "shared"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

func (o Op) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpRenew:
		return "renew"
	case OpRelease:
		return "release"
	case OpTick:
		return "tick"
	case OpSetNode:
		return "set_node"
	case OpRemoveNode:
		return "remove_node"
	case OpForceRelease:
		return "force_release"
	case OpUpdate:
		return "update"
	case OpSessionCreate:
		return "session_create"
	case OpSessionRenew:
		return "session_renew"
	case OpSessionClose:
		return "session_close"
	case OpSemAcquire:
		return "semaphore_acquire"
	case OpSemRenew:
		return "semaphore_renew"
	case OpSemRelease:
		return "semaphore_release"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Command is one log entry's payload. Stamp is the leader's monotonic clock
// reading when it created the entry; it is the only way time enters the FSM.
type Command struct {
	// Version is the encoding the command is written in (Encode) or was
	// read from (DecodeCommand): 1 to 5; 0 means 1. Only a leader that
	// knows every member understands a version may write it (DESIGN.md,
	// "Command versions").
	Version uint8
	Op      Op
	Stamp   int64 // leader monotonic nanoseconds, comparable within one term only
	// StampTerm (version 2 only) is the Raft term the leader was leading
	// in when it read Stamp. A stamp whose term is not its entry's term
	// counts no time (DESIGN.md, "Stale stamps").
	StampTerm uint64 // versions 2 and up
	Name      string // lock name
	Owner     string
	LeaseID   string
	TTL       int64 // milliseconds; 0 on renew keeps the current TTL
	LockDelay int64 // milliseconds
	NodeID    string
	NodeAddr  string
	// Value (version 4 only) is what an acquire or update publishes with
	// the lock.
	Value string
	// SessionID (version 5) ties an acquire (lock or semaphore) to a
	// session instead of a TTL of its own, or names the session of a
	// session op.
	SessionID string
	// Mode (version 5) is a lock acquire's mode; ModeExclusive by default.
	Mode Mode
	// Limit (version 5) is a semaphore acquire's number of permits.
	Limit int64
}

// The first byte of every encoded command is its version, so the format can
// change without misreading old logs. Version 1 entries stay readable forever.
const (
	commandVersion1 = 1 // op, stamp, ttl, lock-delay, five strings
	commandVersion2 = 2 // version 1 with the stamp's term after the stamp
	commandVersion3 = 3 // version 2's encoding; OpForceRelease is valid only from here
	commandVersion4 = 4 // version 3 with Value after the node address; OpUpdate valid only from here
	commandVersion5 = 5 // version 4 with SessionID, Mode, Limit after Value; ops 9-14 valid only from here
	// MaxCommandVersion is the highest command version this build decodes
	// and applies. Nodes publish it (GET /v1/cluster, command_version) and
	// a leader writes a version only when every member has published at
	// least that.
	MaxCommandVersion = commandVersion5
)

// ErrBadCommand is returned for bytes that do not decode to a command.
var ErrBadCommand = errors.New("fsm: malformed command")

// ErrUnknownVersion is returned for a command in a version newer than
// MaxCommandVersion. It also matches ErrUnknownOp: for the node it is the
// same news (a newer version wrote this entry; stop and upgrade).
var ErrUnknownVersion = errors.New("fsm: unknown command version")

// ErrUnknownOp is returned for a well-formed command whose op this version
// does not know: written by a newer version. Applying it as "invalid" here
// while newer replicas apply it for real would make replicas diverge, so it
// is refused like malformed bytes and the node must stop (see DESIGN.md,
// "Introducing a command").
var ErrUnknownOp = errors.New("fsm: unknown op")

// OpInVersion reports whether a command of version v (0: 1) may carry o.
// Each op belongs to the versions from the one that introduced it: a
// command of version v must mean the same to every build that reads v, and
// builds that read up to 2 refuse OpForceRelease (ErrUnknownOp), so this
// build refuses it in versions 1 and 2 too. A leader checks it before it
// writes (raftnode: the gate may allow only an older version).
func OpInVersion(o Op, v uint8) bool {
	if v == 0 {
		v = commandVersion1
	}
	switch {
	case o >= OpAcquire && o <= OpRemoveNode:
		return v <= MaxCommandVersion
	case o == OpForceRelease:
		return v >= commandVersion3 && v <= MaxCommandVersion
	case o == OpUpdate:
		return v >= commandVersion4 && v <= MaxCommandVersion
	case o >= OpSessionCreate && o <= OpSemRelease:
		return v >= commandVersion5 && v <= MaxCommandVersion
	}
	return false
}

// MinVersion is the oldest command version that can carry c: 5 for the
// session and semaphore ops and for a command with a SessionID, a shared
// mode or a limit, 4 for an update or a value, 3 for a force release, else
// 1. A leader writes c only when the gate allows at least this (raftnode).
func MinVersion(c Command) uint8 {
	switch {
	case c.Op >= OpSessionCreate && c.Op <= OpSemRelease, c.SessionID != "", c.Mode != ModeExclusive, c.Limit != 0:
		return commandVersion5
	case c.Op == OpUpdate || c.Value != "":
		return commandVersion4
	case c.Op == OpForceRelease:
		return commandVersion3
	}
	return commandVersion1
}

// Fits reports whether c can be written in version v (0: 1): its op
// belongs to v and v has room for its fields. A value cannot be dropped to
// fit an older version: that would publish something else than asked.
func Fits(c Command, v uint8) bool {
	if v == 0 {
		v = commandVersion1
	}
	return OpInVersion(c.Op, v) && v >= MinVersion(c)
}

// Encode appends the compact binary form of c in version c.Version (0: 1)
// to dst and returns it. Version 1 has no StampTerm: it is dropped. A
// version above MaxCommandVersion, or OpForceRelease in a version before 3,
// is a programming error and panics: there is no encoding to write, and an
// entry no replica decodes would stop them all. (Ops no version knows are
// encoded, so tests can check that decoders refuse them.)
func (c *Command) Encode(dst []byte) []byte {
	v := c.Version
	if v == 0 {
		v = commandVersion1
	}
	if v > MaxCommandVersion {
		panic(fmt.Sprintf("fsm: cannot encode command version %d (max %d)", v, MaxCommandVersion))
	}
	if c.Op >= OpForceRelease && c.Op <= OpSemRelease && !OpInVersion(c.Op, v) {
		panic(fmt.Sprintf("fsm: command version %d cannot carry %v", v, c.Op))
	}
	if c.Value != "" && v < commandVersion4 {
		panic(fmt.Sprintf("fsm: command version %d cannot carry a value", v))
	}
	if (c.SessionID != "" || c.Mode != ModeExclusive || c.Limit != 0) && v < commandVersion5 {
		panic(fmt.Sprintf("fsm: command version %d cannot carry a session, a mode or a limit", v))
	}
	dst = append(dst, v, byte(c.Op))
	dst = binary.AppendVarint(dst, c.Stamp)
	if v >= commandVersion2 {
		dst = binary.AppendUvarint(dst, c.StampTerm)
	}
	dst = binary.AppendVarint(dst, c.TTL)
	dst = binary.AppendVarint(dst, c.LockDelay)
	for _, s := range [...]string{c.Name, c.Owner, c.LeaseID, c.NodeID, c.NodeAddr} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	if v >= commandVersion4 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Value)))
		dst = append(dst, c.Value...)
	}
	if v >= commandVersion5 {
		dst = binary.AppendUvarint(dst, uint64(len(c.SessionID)))
		dst = append(dst, c.SessionID...)
		dst = append(dst, byte(c.Mode))
		dst = binary.AppendVarint(dst, c.Limit)
	}
	return dst
}

// DecodeCommand parses bytes written by Encode.
func DecodeCommand(b []byte) (Command, error) {
	d := decoder{buf: b}
	v := d.byte()
	switch {
	case d.err != nil:
		return Command{}, d.err
	case v == 0:
		return Command{}, fmt.Errorf("%w: version 0", ErrBadCommand)
	case v > MaxCommandVersion:
		// No attempt to read what we can of it: a newer version's fields
		// may change what the entry means (DESIGN.md, "Command versions").
		return Command{}, fmt.Errorf("%w (%w): version %d, this build reads up to %d", ErrUnknownVersion, ErrUnknownOp, v, MaxCommandVersion)
	}
	c := Command{Version: v, Op: Op(d.byte())}
	if d.err == nil && !OpInVersion(c.Op, v) {
		return Command{}, fmt.Errorf("%w: %v in a version %d command", ErrUnknownOp, c.Op, v)
	}
	c.Stamp = d.varint()
	if v >= commandVersion2 {
		c.StampTerm = d.uvarint()
	}
	c.TTL = d.varint()
	c.LockDelay = d.varint()
	c.Name = d.string()
	c.Owner = d.string()
	c.LeaseID = d.string()
	c.NodeID = d.string()
	c.NodeAddr = d.string()
	if v >= commandVersion4 {
		c.Value = d.string()
	}
	if v >= commandVersion5 {
		c.SessionID = d.string()
		c.Mode = Mode(d.byte())
		c.Limit = d.varint()
		if d.err == nil && c.Mode > ModeShared {
			// A mode this build does not know was written by a newer one.
			return Command{}, fmt.Errorf("%w: %v in a version %d command", ErrUnknownOp, c.Mode, v)
		}
	}
	if d.err != nil {
		return Command{}, d.err
	}
	if len(d.buf) != 0 {
		return Command{}, fmt.Errorf("%w: %d trailing bytes", ErrBadCommand, len(d.buf))
	}
	return c, nil
}

// decoder reads varints and length-prefixed strings, remembering the first error.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrBadCommand, what)
	}
	d.buf = nil
}

func (d *decoder) byte() byte {
	if len(d.buf) < 1 {
		d.fail("byte")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.fail("string")
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}
