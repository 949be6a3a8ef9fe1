// Package fence checks fencing tokens where a service keeps its data.
//
// A raftlock fencing token protects nothing until the storage that a lock holder
// writes to checks it: a holder paused past its lease (a GC pause, a SIGSTOP, a slow
// network) still believes it holds the lock when it resumes. The storage must
// therefore refuse a write whose token is not higher than the highest token it has
// already accepted for the same resource, and record the new highest token in the
// same atomic step.
//
// A [Guard] does that. This package has guards kept in memory ([Memory]), in a
// per-resource token table through database/sql ([SQL]) or pgx ([Pgx]), a helper for
// a fenced conditional update of a business row ([Row]), and an HTTP middleware for
// services that receive the token in a Fencing-Token header ([Middleware]).
//
// A rejected token is reported as a [*StaleTokenError], which matches
// [ErrStaleToken] with errors.Is.
//
// Tokens must be strictly increasing: one token is accepted once per resource, so a
// holder that writes a resource twice under one lease has its second write refused.
package fence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
)

// MaxToken is the highest token a guard accepts: PostgreSQL's bigint holds the
// recorded tokens. Raft log indexes do not come near it.
const MaxToken = math.MaxInt64

var (
	// ErrStaleToken is matched (with errors.Is) by every *StaleTokenError.
	ErrStaleToken = errors.New("fence: stale fencing token")
	// ErrInvalidToken is returned for token 0 and tokens above MaxToken.
	// raftlock never issues them: its tokens are Raft log indexes, which start at 1.
	ErrInvalidToken = errors.New("fence: invalid fencing token")
)

// StaleTokenError reports a write refused because a token at least as high had
// already been accepted for the resource.
type StaleTokenError struct {
	Resource string
	Token    uint64 // the refused token
	Current  uint64 // the highest token accepted for Resource when the write was refused
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale fencing token %d for %q: token %d was already accepted",
		e.Token, e.Resource, e.Current)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Guard accepts or refuses writes by their fencing token.
//
// There is deliberately no separate read-only check: checking and recording in two
// steps would let two writers both pass the check.
type Guard interface {
	// Advance accepts token for resource if it is strictly higher than every token
	// accepted for resource before, and records it as the highest, atomically.
	// Otherwise it records nothing and returns a *StaleTokenError.
	// Tokens outside 1..MaxToken give an error matching ErrInvalidToken.
	Advance(ctx context.Context, resource string, token uint64) error
}

func validToken(token uint64) error {
	if token == 0 || token > MaxToken {
		return fmt.Errorf("%w: %d is not in 1..%d", ErrInvalidToken, token, uint64(MaxToken))
	}
	return nil
}

// Memory is a Guard kept in a map, for tests and single-process services.
// It is safe for concurrent use. The zero value is ready to use.
type Memory struct {
	mu   sync.Mutex
	last map[string]uint64
}

// NewMemory returns an empty in-memory guard.
func NewMemory() *Memory { return &Memory{} }

// Advance implements Guard.
func (m *Memory) Advance(_ context.Context, resource string, token uint64) error {
	if err := validToken(token); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.last[resource]; token <= cur {
		return &StaleTokenError{Resource: resource, Token: token, Current: cur}
	}
	if m.last == nil {
		m.last = make(map[string]uint64)
	}
	m.last[resource] = token
	return nil
}

// Current returns the highest token accepted for resource, 0 if none.
func (m *Memory) Current(resource string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[resource]
}
