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
)

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
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Command is one log entry's payload. Stamp is the leader's monotonic clock
// reading when it created the entry; it is the only way time enters the FSM.
type Command struct {
	Op        Op
	Stamp     int64  // leader monotonic nanoseconds, comparable within one term only
	Name      string // lock name
	Owner     string
	LeaseID   string
	TTL       int64 // milliseconds; 0 on renew keeps the current TTL
	LockDelay int64 // milliseconds
	NodeID    string
	NodeAddr  string
}

// commandVersion is the first byte of every encoded command, so the format can
// change without misreading old logs.
const commandVersion = 1

// ErrBadCommand is returned for bytes that do not decode to a command.
var ErrBadCommand = errors.New("fsm: malformed command")

// ErrUnknownOp is returned for a well-formed command whose op this version
// does not know: written by a newer version. Applying it as "invalid" here
// while newer replicas apply it for real would make replicas diverge, so it
// is refused like malformed bytes and the node must stop (see DESIGN.md,
// "Introducing a command").
var ErrUnknownOp = errors.New("fsm: unknown op")

// knownOp reports whether this version can apply o.
func knownOp(o Op) bool { return o >= OpAcquire && o <= OpRemoveNode }

// Encode appends the compact binary form of c to dst and returns it.
func (c *Command) Encode(dst []byte) []byte {
	dst = append(dst, commandVersion, byte(c.Op))
	dst = binary.AppendVarint(dst, c.Stamp)
	dst = binary.AppendVarint(dst, c.TTL)
	dst = binary.AppendVarint(dst, c.LockDelay)
	for _, s := range [...]string{c.Name, c.Owner, c.LeaseID, c.NodeID, c.NodeAddr} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

// DecodeCommand parses bytes written by Encode.
func DecodeCommand(b []byte) (Command, error) {
	d := decoder{buf: b}
	if v := d.byte(); v != commandVersion {
		return Command{}, fmt.Errorf("%w: version %d", ErrBadCommand, v)
	}
	c := Command{Op: Op(d.byte())}
	if d.err == nil && !knownOp(c.Op) {
		return Command{}, fmt.Errorf("%w: %v", ErrUnknownOp, c.Op)
	}
	c.Stamp = d.varint()
	c.TTL = d.varint()
	c.LockDelay = d.varint()
	c.Name = d.string()
	c.Owner = d.string()
	c.LeaseID = d.string()
	c.NodeID = d.string()
	c.NodeAddr = d.string()
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
