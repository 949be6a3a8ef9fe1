package raftnode

import (
	"fmt"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// maxBackupClock bounds the FSM clock of a backup (nanoseconds since its
// cluster's first entry): a century, so that a deadline computed from it
// (the clock plus a TTL) cannot overflow.
const maxBackupClock = int64(100 * 365 * 24 * time.Hour)

// checkBackupState refuses a decoded backup state that the API could never
// have written: every name, owner, value, lease and session id by the API's
// own rules (package api), TTLs, lock-delays and deadlines within their
// ranges, and every token and index at most the backup's own index (a
// token above it would be handed out again after the restore, lower than
// one clients or storage have seen). fsm.Machine.Restore has already
// refused duplicates and records that do not fit together. The error names
// the record.
func checkBackupState(info BackupInfo, m *fsm.Machine) error {
	c := m.Clock()
	if c.Now < 0 || c.Now > maxBackupClock {
		return fmt.Errorf("clock at %d ns, outside 0..%d", c.Now, maxBackupClock)
	}
	if id := m.ClusterID(); id != "" && !validClusterID(id) {
		return fmt.Errorf("cluster id %s is not %d hex digits", quoteShort(id), clusterIDLen)
	}
	index := func(what string, v uint64) error {
		if v > info.Index {
			return fmt.Errorf("%s %d above the backup's index %d", what, v, info.Index)
		}
		return nil
	}
	if err := index("tombstone floor", m.Floor()); err != nil {
		return err
	}
	// lease checks one stored lease; a lease of a session keeps no TTL,
	// lock-delay or deadline of its own.
	lease := func(l fsm.Lock, permit bool) error {
		if err := api.CheckOwner(l.Owner); err != nil {
			return err
		}
		if err := api.CheckID("lease_id", l.LeaseID); err != nil {
			return err
		}
		if err := api.CheckValue(l.Value); err != nil {
			return err
		}
		if l.Token == 0 {
			return fmt.Errorf("fencing token 0")
		}
		if err := index("fencing token", l.Token); err != nil {
			return err
		}
		if l.SessionID != "" {
			if err := api.CheckID("session_id", l.SessionID); err != nil {
				return err
			}
			if l.TTL != 0 || l.LockDelay != 0 || l.Deadline != 0 {
				return fmt.Errorf("lease of a session with a TTL (%d ms), lock-delay (%d ms) or deadline of its own", l.TTL, l.LockDelay)
			}
			return nil
		}
		if err := api.CheckRange("ttl_ms", l.TTL, api.MinTTLMs, api.MaxTTLMs); err != nil {
			return err
		}
		if permit && l.LockDelay != 0 {
			return fmt.Errorf("permit with a lock-delay")
		}
		if err := api.CheckRange("lock_delay_ms", l.LockDelay, 0, api.MaxLockDelayMs); err != nil {
			return err
		}
		return deadline(c.Now, l.Deadline, l.TTL)
	}
	return m.Visit(fsm.Visitor{
		Lock: func(name string, idx uint64, holders []fsm.Lock, delayed bool, until int64, expired fsm.Lock) error {
			at := func(err error) error { return fmt.Errorf("lock %s: %w", quoteShort(name), err) }
			if err := api.CheckName(name); err != nil {
				return at(err)
			}
			if err := index("index", idx); err != nil {
				return at(err)
			}
			for _, l := range holders {
				if err := lease(l, false); err != nil {
					return at(fmt.Errorf("holder with token %d: %w", l.Token, err))
				}
			}
			if delayed {
				// The lease that expired: its terms ran out already, its
				// identity and token are what reads show.
				if err := api.CheckOwner(expired.Owner); err != nil {
					return at(err)
				}
				if err := api.CheckValue(expired.Value); err != nil {
					return at(err)
				}
				if err := index("expired lease's fencing token", expired.Token); err != nil {
					return at(err)
				}
				if until < 0 || until > c.Now+api.MaxLockDelayMs*1e6 {
					return at(fmt.Errorf("lock-delay ends %d ns past the clock, more than lock_delay_ms %d allows", until-c.Now, api.MaxLockDelayMs))
				}
			}
			return nil
		},
		Session: func(s fsm.Session) error {
			at := func(err error) error { return fmt.Errorf("session %s: %w", quoteShort(s.ID), err) }
			if err := api.CheckID("session_id", s.ID); err != nil {
				return at(err)
			}
			if err := api.CheckOwner(s.Owner); err != nil {
				return at(err)
			}
			if err := api.CheckRange("ttl_ms", s.TTL, api.MinTTLMs, api.MaxTTLMs); err != nil {
				return at(err)
			}
			if err := api.CheckRange("lock_delay_ms", s.LockDelay, 0, api.MaxLockDelayMs); err != nil {
				return at(err)
			}
			if err := index("index", s.Index); err != nil {
				return at(err)
			}
			if err := deadline(c.Now, s.Deadline, s.TTL); err != nil {
				return at(err)
			}
			return nil
		},
		Semaphore: func(name string, limit int64, idx uint64, holders []fsm.Lock) error {
			at := func(err error) error { return fmt.Errorf("semaphore %s: %w", quoteShort(name), err) }
			if err := api.CheckName(name); err != nil {
				return at(err)
			}
			if err := api.CheckRange("limit", limit, 1, api.MaxSemaphoreLimit); err != nil {
				return at(err)
			}
			if err := index("index", idx); err != nil {
				return at(err)
			}
			for _, l := range holders {
				if err := lease(l, true); err != nil {
					return at(fmt.Errorf("permit with token %d: %w", l.Token, err))
				}
			}
			return nil
		},
		Tombstone: func(name string, idx uint64) error {
			at := func(err error) error { return fmt.Errorf("tombstone %s: %w", quoteShort(name), err) }
			if err := api.CheckName(name); err != nil {
				return at(err)
			}
			if err := index("index", idx); err != nil {
				return at(err)
			}
			return nil
		},
	})
}

// deadline checks a lease's or session's deadline against the clock: no
// more than its TTL ahead (a renew sets it to now + TTL), and not before
// the clock began.
func deadline(now, d, ttlMs int64) error {
	if d < 0 || d > now+ttlMs*1e6 {
		return fmt.Errorf("deadline %d ns past the clock, more than its ttl_ms %d allows", d-now, ttlMs)
	}
	return nil
}

// quoteShort quotes a name or id for an error message: escaped (a name may
// hold control characters) and cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}
