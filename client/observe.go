package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
)

// DefaultObserveWait is how long one blocking read of Observe asks the
// server to wait for a change (the API's wait_ms).
const DefaultObserveWait = 60 * time.Second

// LockState is a lock as Observe and Election report it: its holder (if
// any), the value the holder published, and Index, the Raft index of the
// change that made it so. States of one lock are ordered by Index.
type LockState struct {
	Name  string
	Held  bool
	Owner string
	Token uint64 // fencing token of the holding lease
	TTL   time.Duration
	Value string
	Index uint64
}

func lockState(j *api.Lock) LockState {
	return LockState{
		Name: j.Name, Held: j.Held, Owner: j.Owner, Token: j.FencingToken,
		TTL: time.Duration(j.TTLMs) * time.Millisecond, Value: j.Value, Index: j.Index,
	}
}

// ObserveOptions are the options of Observe and ObservePrefix.
type ObserveOptions struct {
	// Stale lets any node answer from its own, possibly lagging, state,
	// which keeps the watch going without a leader. Answers older than one
	// already delivered are dropped either way, so a watcher never goes
	// back in time; but with Stale, what it sees may lag the leader's.
	// Default: linearizable reads, answered by the leader.
	Stale bool
	// Wait bounds one blocking read (default DefaultObserveWait, at most
	// 300s).
	Wait time.Duration
	// OnError, if set, is called with every failed read (they are retried
	// with backoff). A read refused for good (401, 403, 400) ends the watch:
	// the channel closes after OnError has seen why.
	OnError func(error)
}

// Observe reports lock name's state: first its current state, then each
// change, in index order, "no holder" included (Held false), until ctx ends;
// then the channel is closed. Changes closer together than a round trip may
// be merged: a watcher sees the latest state, never one older than a state
// it has seen. Reads fail over across nodes and leader changes, resuming
// from the last index seen.
func (c *Client) Observe(ctx context.Context, name string, opts ObserveOptions) <-chan LockState {
	ch := make(chan LockState)
	path := "/v1/locks/" + url.PathEscape(name)
	go func() {
		defer close(ch)
		c.observeLoop(ctx, path, url.Values{}, opts, func(resp any) bool {
			j := resp.(*api.Lock)
			st := lockState(j)
			select {
			case ch <- st:
				return true
			case <-ctx.Done():
				return false
			}
		}, func() any { return new(api.Lock) }, func(v any) uint64 { return v.(*api.Lock).Index })
	}()
	return ch
}

// PrefixState is what ObservePrefix reports: the held locks under the
// prefix, and the highest index of any change under it (held or freed).
type PrefixState struct {
	Locks     []LockState // held locks, sorted by name
	Truncated bool        // more locks match than were returned
	Index     uint64
}

// ObservePrefix reports the held locks whose names start with prefix: first
// as they are, then after each change under the prefix (a lock taken,
// changed or freed), in index order, until ctx ends; then the channel is
// closed. Like Observe, it may merge changes but never goes back.
func (c *Client) ObservePrefix(ctx context.Context, prefix string, opts ObserveOptions) <-chan PrefixState {
	ch := make(chan PrefixState)
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	go func() {
		defer close(ch)
		c.observeLoop(ctx, "/v1/locks", q, opts, func(resp any) bool {
			j := resp.(*api.LockList)
			st := PrefixState{Truncated: j.Truncated, Index: j.Index, Locks: make([]LockState, 0, len(j.Locks))}
			for i := range j.Locks {
				st.Locks = append(st.Locks, lockState(&j.Locks[i]))
			}
			select {
			case ch <- st:
				return true
			case <-ctx.Done():
				return false
			}
		}, func() any { return new(api.LockList) }, func(v any) uint64 { return v.(*api.LockList).Index })
	}()
	return ch
}

// observeLoop issues blocking reads of path with ?index= the last index
// delivered, delivering each answer that is newer (or the first one).
func (c *Client) observeLoop(ctx context.Context, path string, q url.Values, opts ObserveOptions,
	deliver func(any) bool, fresh func() any, indexOf func(any) uint64) {
	wait := opts.Wait
	if wait <= 0 {
		wait = DefaultObserveWait
	}
	wait = min(wait, time.Duration(api.MaxWaitMs)*time.Millisecond)
	if opts.Stale {
		q.Set("stale", "true")
	}
	var last uint64
	delivered := false
	fails, quick := 0, 0
	for ctx.Err() == nil {
		r := request{method: http.MethodGet, path: path, leader: !opts.Stale, idempotent: true}
		if delivered {
			q.Set("index", strconv.FormatUint(last, 10))
			q.Set("wait_ms", strconv.FormatInt(wait.Milliseconds(), 10))
			r.serverWait = wait
		}
		r.query = q.Encode()
		out := fresh()
		start := c.clock.Now()
		_, err := c.do(ctx, r, out)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			err = fmt.Errorf("raftlock: watch %s: %w", path, err)
			if opts.OnError != nil {
				opts.OnError(err)
			}
			if permanent(err) {
				c.log.Warn("watch ended", "path", path, "error", err)
				return
			}
			c.log.Debug("watch read failed", "path", path, "error", err)
			if c.sleep(ctx, c.backoff(min(fails, 10))) != nil {
				return
			}
			fails++
			continue
		}
		fails = 0
		idx := indexOf(out)
		if delivered && idx <= last {
			// No change within the wait, or an answer from a node that lags
			// what was already delivered: never report it. A server that
			// answered long before the wait was over (one that does not
			// block) must not make us spin.
			if c.clock.Now().Sub(start) < wait/2 {
				quick++
				if c.sleep(ctx, c.backoff(min(quick, 10))) != nil {
					return
				}
			}
			continue
		}
		quick = 0
		if !deliver(out) {
			return
		}
		last, delivered = idx, true
	}
}

// permanent reports whether retrying a read cannot help.
func permanent(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case api.CodeUnauthorized, api.CodeForbidden, api.CodeBadRequest, api.CodeNotFound:
		return true
	}
	return false
}
