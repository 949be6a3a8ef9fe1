package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// viewOf is a lock as reads show it: never with its lease_id or session
// id. A leader's view adds its time left and parked acquires
// (nodeapi.LeaseView). A lock held shared shows its lowest-token holder, as
// an exclusive one shows its only holder, and every holder besides. A list
// has l from its listing: a shared lock's holders are read after it (if
// they came and went in between, it shows the newer set under l's index,
// which can only make a blocking reader look again).
func viewOf(m nodeapi.LockReader, l fsm.Lock) api.Lock {
	holders := []fsm.Lock{l}
	if l.Mode == fsm.ModeShared {
		if hs := m.Holders(l.Name); len(hs) > 0 {
			holders = hs
		}
	}
	return viewHeld(m, holders, l.Index)
}

// viewHeld is a held lock as reads show it, from every holder (by token)
// and the lock's index: the first holder's mode is the lock's.
func viewHeld(m nodeapi.LockReader, holders []fsm.Lock, index uint64) api.Lock {
	l := holders[0]
	v := api.Lock{Name: l.Name, Held: true, Owner: l.Owner, FencingToken: l.Token, TTLMs: l.TTL, Value: l.Value, Index: index}
	lv, leads := m.(nodeapi.LeaseView)
	if leads {
		v.RemainingMs = remaining(lv, l)
		v.Waiters = lv.Waiters(l.Name)
	}
	if l.Mode == fsm.ModeShared {
		v.Mode = api.ModeShared
		v.Holders = make([]api.LockHolder, 0, len(holders))
		for _, h := range holders {
			lh := api.LockHolder{Owner: h.Owner, FencingToken: h.Token, TTLMs: h.TTL}
			if leads {
				lh.RemainingMs = remaining(lv, h)
			}
			v.Holders = append(v.Holders, lh)
		}
	}
	return v
}

// remaining is a lease's time left as the leader projects it (nil when it
// cannot say). A lease of a session has no deadline of its own: the state
// machine shows it with its session's.
func remaining(lv nodeapi.LeaseView, l fsm.Lock) *int64 {
	d, ok := lv.Remaining(l)
	if !ok {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// modeName is a lock mode as answers show it: "shared", or "" (left out)
// for exclusive.
func modeName(m fsm.Mode) string {
	if m == fsm.ModeShared {
		return api.ModeShared
	}
	return ""
}

// outcome turns the state machine's result for a lock command into the
// contract's answer.
func outcome(r fsm.Result, cmd fsm.Command) (int, any, error) {
	name := cmd.Name
	switch r.Status {
	case fsm.StatusOK:
		l := r.Lock
		return http.StatusOK, api.Lease{Name: l.Name, Owner: l.Owner, LeaseID: l.LeaseID, FencingToken: l.Token, TTLMs: l.TTL,
			SessionID: l.SessionID, Mode: modeName(l.Mode)}, nil
	case fsm.StatusHeld:
		return http.StatusConflict, heldError(r, name), nil
	case fsm.StatusNotHolder:
		return http.StatusConflict, api.Error{Error: api.CodeNotHolder,
			Message: fmt.Sprintf("this lease does not hold lock %q (expired, released, or never did)", name)}, nil
	}
	return refusal(r, cmd)
}

// heldError is the 409 held answer: the holder, and every holder when the
// lock is held shared.
func heldError(r fsm.Result, name string) api.HeldError {
	holder := r.Holder
	if holder.Token == 0 && len(r.Holders) > 0 {
		holder = r.Holders[0]
	}
	e := api.HeldError{Error: api.CodeHeld, Holder: api.Holder{Owner: holder.Owner, FencingToken: holder.Token}, RetryAfterMs: r.Retry}
	shared := slices.ContainsFunc(r.Holders, func(l fsm.Lock) bool { return l.Mode == fsm.ModeShared })
	switch {
	case r.Retry > 0:
		e.Message = fmt.Sprintf("lock %q is in its lock-delay after the lease of %q expired; retry in %d ms", name, holder.Owner, r.Retry)
	case shared:
		e.Message = fmt.Sprintf("lock %q is held shared by %d leases (lowest fencing token %d, of %q)", name, len(r.Holders), holder.Token, holder.Owner)
	default:
		e.Message = fmt.Sprintf("lock %q is held by %q (fencing token %d)", name, holder.Owner, holder.Token)
	}
	if shared {
		// Bounded: a lock held by thousands of readers would otherwise make
		// every refused acquire answer with all of them.
		e.HoldersTotal = len(r.Holders)
		e.Holders = make([]api.Holder, min(len(r.Holders), api.MaxErrorHolders))
		for i := range e.Holders {
			e.Holders[i] = api.Holder{Owner: r.Holders[i].Owner, FencingToken: r.Holders[i].Token}
		}
	}
	return e
}

// refusal answers the outcomes that lock, semaphore and session commands
// share beyond their own: no session, a full session, an invalid command.
// Each is the state machine's decision, so nothing changed.
func refusal(r fsm.Result, cmd fsm.Command) (int, any, error) {
	switch r.Status {
	case fsm.StatusNoSession:
		return 0, nil, &apiError{http.StatusNotFound, api.CodeNoSession, "session_id: no such session (never created, expired, or closed); its leases are gone"}
	case fsm.StatusSessionFull:
		return 0, nil, &apiError{http.StatusConflict, api.CodeSessionFull,
			fmt.Sprintf("session_id: the session holds %d leases, the most one session may", api.MaxLeasesPerSession)}
	case fsm.StatusInvalid:
		return 0, nil, badRequest("%s", invalidReason(cmd))
	}
	return 0, nil, fmt.Errorf("the state machine answered %v to a %v command", r.Status, cmd.Op)
}

// invalidReason says why the state machine may have refused cmd as
// invalid, where the request's validation could not know.
func invalidReason(cmd fsm.Command) string {
	switch cmd.Op {
	case fsm.OpRenew, fsm.OpSemRenew:
		return "lease_id: the lease belongs to a session; renew the session (POST /v1/sessions/renew), not its leases"
	case fsm.OpUpdate:
		return "lease_id: the lease holds the lock shared, and a shared hold publishes no value"
	case fsm.OpSessionCreate:
		return "session_id: in use by a session of another owner"
	case fsm.OpAcquire, fsm.OpSemAcquire:
		// The checks the request passed leave one case: a retry whose terms
		// differ from those the lease was granted under.
		return "lease_id: this lease holds it on other terms (with another session_id, or a session against a TTL of its own); retry with the same terms"
	}
	return "the state machine refused the command as invalid"
}

// acquire may park for wait_ms on the leader: its request timeout grows by it.
func acquireWait(req *acquireRequest) time.Duration {
	return time.Duration(req.WaitMs) * time.Millisecond
}

func (s *Server) acquire(ctx context.Context, req *acquireRequest) (int, any, error) {
	// A value needs command format 4, a session or shared mode format 5:
	// the leader answers 503 not_supported_yet until every node reads it.
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: req.Name, Owner: req.Owner, LeaseID: req.LeaseID, LockDelay: req.LockDelayMs, Value: req.Value, SessionID: req.SessionID}
	if req.TTLMs != nil {
		cmd.TTL = *req.TTLMs
	}
	if req.Mode == api.ModeShared {
		if req.Value != "" {
			// Readers share the hold: whose value would the lock show?
			return 0, nil, badRequest("value: not with mode %q (a shared hold publishes no value; use an exclusive lock to publish one)", api.ModeShared)
		}
		cmd.Mode = fsm.ModeShared
	}
	return s.acquireAnswer(ctx, cmd, acquireWait(req), outcome)
}

// answerFunc reads the state machine's result for a command as the
// contract's answer: outcome for locks, semOutcome for semaphores,
// sessionOutcome for sessions.
type answerFunc func(fsm.Result, fsm.Command) (int, any, error)

// applyAnswer runs cmd through the gate and answers with answer.
func (s *Server) applyAnswer(ctx context.Context, cmd fsm.Command, answer answerFunc) (int, any, error) {
	res, err := s.applyGated(ctx, cmd)
	if err != nil {
		return 0, nil, err
	}
	return answer(res, cmd)
}

// acquireAnswer runs acquire cmd through the gate, parked for up to wait
// while it is refused, and answers with answer.
func (s *Server) acquireAnswer(ctx context.Context, cmd fsm.Command, wait time.Duration, answer answerFunc) (int, any, error) {
	res, err := s.acquireGated(ctx, cmd, wait)
	if err != nil {
		return 0, nil, err
	}
	return answer(res, cmd)
}

// renewCommand is the command of a renew: op is fsm.OpRenew for a lock's
// lease, fsm.OpSemRenew for a permit (the same fields and rules).
func renewCommand(op fsm.Op, req *renewRequest) fsm.Command {
	cmd := fsm.Command{Op: op, Name: req.Name, LeaseID: req.LeaseID}
	if req.TTLMs != nil {
		cmd.TTL = *req.TTLMs
	}
	return cmd
}

func (s *Server) renew(ctx context.Context, req *renewRequest) (int, any, error) {
	return s.applyAnswer(ctx, renewCommand(fsm.OpRenew, req), outcome)
}

// update replaces the value of a lock the lease holds (command format 4:
// 503 not_supported_yet until every node reads it). The answer is the lease
// as it stands, like a renew's.
func (s *Server) update(ctx context.Context, req *updateRequest) (int, any, error) {
	cmd := fsm.Command{Op: fsm.OpUpdate, Name: req.Name, LeaseID: req.LeaseID, Value: req.Value}
	return s.applyAnswer(ctx, cmd, outcome)
}

func (s *Server) release(ctx context.Context, req *releaseRequest) (int, any, error) {
	if req.Force {
		return s.forceRelease(ctx, req)
	}
	cmd := fsm.Command{Op: fsm.OpRelease, Name: req.Name, LeaseID: req.LeaseID}
	res, err := s.applyGated(ctx, cmd)
	if err != nil {
		return 0, nil, err
	}
	if res.Status == fsm.StatusOK {
		return http.StatusOK, api.Released{Released: true}, nil
	}
	return outcome(res, cmd)
}

// writeHandler is every POST endpoint: read and validate a request of type R
// (answering bad input itself), then decide it where it can be decided (see
// onLeader). extra, if set, is time the request may take beyond
// RequestTimeout.
func writeHandler[R any, P interface {
	*R
	validator
}](s *Server, extra func(*R) time.Duration, decide func(context.Context, *R) (int, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := new(R)
		body, ok := s.parse(w, r, P(req))
		if !ok {
			return
		}
		if n, ok := any(req).(named); ok {
			if err := mayName(r.Context(), n.lockName()); err != nil {
				writeError(w, err)
				return
			}
		}
		if extra != nil && extra(req) > 0 && batched(r.Context()) {
			writeError(w, badRequest("wait_ms: a batched call cannot wait (it would hold the batch's other answers); send a waiting acquire on its own"))
			return
		}
		if extra != nil {
			ctx, cancel := context.WithTimeout(r.Context(), extra(req)+s.opts.RequestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		s.onLeader(w, r, body, func(ctx context.Context) (int, any, error) { return decide(ctx, req) })
	}
}

// parse reads and validates a request body, answering the error itself.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, dst validator) ([]byte, bool) {
	if err := jsonContentType(r); err != nil {
		writeError(w, err)
		return nil, false
	}
	body, err := readBody(w, r)
	if err == nil {
		err = decode(body, dst)
	}
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return body, true
}

// pathName is the {name} of a lock's or a semaphore's read path, given
// still escaped (lockPathName, or the router's {name}), checked as a
// write's name is and against the caller's names; on false it has answered.
func pathName(w http.ResponseWriter, r *http.Request, escaped string) (string, bool) {
	name, err := url.PathUnescape(escaped)
	if err != nil {
		writeError(w, badRequest("name: bad path escape: %v", err))
		return "", false
	}
	if err := validName(name); err != nil {
		writeError(w, err)
		return "", false
	}
	if err := mayName(r.Context(), name); err != nil {
		writeError(w, err)
		return "", false
	}
	return name, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	name, ok := pathName(w, r, lockPathName(r))
	if !ok {
		return
	}
	s.read(w, r, &watchKey{keys: []string{name}}, func(m nodeapi.LockReader) (any, uint64, error) {
		// Holders and index from one read: read apart, a shared hold
		// replaced in between could show under the other's index.
		holders, idx := m.LookupHolders(name)
		if len(holders) > 0 {
			return viewHeld(m, holders, idx), idx, nil
		}
		return api.FreeLock{Name: name, Index: idx}, idx, nil
	})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q, err := query(r)
	if err != nil {
		writeError(w, err)
		return
	}
	prefix := q.Get("prefix")
	if len(prefix) > api.MaxName {
		writeError(w, badRequest("prefix: must be at most %d bytes", api.MaxName))
		return
	}
	limit := api.DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > api.MaxListLimit {
			writeError(w, badRequest("limit: must be an integer between 1 and %d", api.MaxListLimit))
			return
		}
		limit = n
	}
	prefixes, err := listScope(r.Context(), prefix)
	if err != nil {
		writeError(w, err)
		return
	}
	s.read(w, r, &watchKey{keys: prefixes, prefix: true}, func(m nodeapi.LockReader) (any, uint64, error) {
		locks, truncated, idx := listUnder(m, prefixes, limit)
		views := make([]api.Lock, len(locks))
		for i, l := range locks {
			views[i] = viewOf(m, l)
		}
		return api.LockList{Locks: views, Truncated: truncated, Index: idx}, idx, nil
	})
}

// query parses the query string strictly: url.Query drops a pair it cannot
// unescape, and ?prefix=%zz would then list every lock.
func query(r *http.Request) (url.Values, error) {
	q := url.Values{}
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, badRequest("query: bad escape in parameter name %q", k)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, badRequest("%s: bad escape in the query: %v", key, err)
		}
		q.Add(key, val)
	}
	return q, nil
}

// watchKey is what a blocking read waits on: one lock, or every lock under
// some prefixes (one, or a token's prefixes under a wider one: listScope).
type watchKey struct {
	keys   []string
	prefix bool
}

// indexOf is the index a blocking read on k compares with its ?index=.
func (k watchKey) indexOf(m nodeapi.LockReader) uint64 {
	var idx uint64
	for _, key := range k.keys {
		if k.prefix {
			idx = max(idx, m.PrefixIndex(key))
		} else {
			idx = max(idx, m.Index(key))
		}
	}
	return idx
}

// watch returns a channel closed when any of k's keys may have changed
// (Watcher), and its cancel.
func (k watchKey) watch(wt Watcher) (<-chan struct{}, func()) {
	if len(k.keys) == 1 {
		return wt.Watch(k.keys[0], k.prefix)
	}
	woken := make(chan struct{})
	stop := make(chan struct{})
	var once sync.Once
	cancels := make([]func(), len(k.keys))
	for i, key := range k.keys {
		ch, cancel := wt.Watch(key, k.prefix)
		cancels[i] = cancel
		go func() {
			select {
			case <-ch:
				once.Do(func() { close(woken) })
			case <-stop:
			}
		}()
	}
	return woken, func() {
		close(stop)
		for _, c := range cancels {
			c()
		}
	}
}

// Watcher is what a Store implements to wake parked blocking reads
// (raftnode.Node): Watch returns a channel closed when this node applies an
// entry that changes lock key (with prefix, any lock under key) or restores
// a snapshot; cancel releases it. A Store without it has blocking reads
// poll its state every watchPoll.
type Watcher interface {
	Watch(key string, prefix bool) (<-chan struct{}, func())
}

const watchPoll = 50 * time.Millisecond

// blocking parses ?index=N&wait_ms=M: ok is false when there is no index
// (a plain read). wait_ms defaults to api.DefaultBlockWaitMs.
func blocking(q url.Values) (after uint64, wait time.Duration, ok bool, err error) {
	v := q.Get("index")
	if v == "" {
		if q.Get("wait_ms") != "" {
			return 0, 0, false, badRequest("wait_ms: only with index")
		}
		return 0, 0, false, nil
	}
	after, perr := strconv.ParseUint(v, 10, 64)
	if perr != nil {
		return 0, 0, false, badRequest("index: must be a non-negative integer")
	}
	ms := int64(api.DefaultBlockWaitMs)
	if v := q.Get("wait_ms"); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 || n > api.MaxWaitMs {
			return 0, 0, false, badRequest("wait_ms: must be an integer between 0 and %d", api.MaxWaitMs)
		}
		ms = n
	}
	return after, time.Duration(ms) * time.Millisecond, true, nil
}

// park waits, on this node, until its own state shows k's index above
// after, or wait runs out, or the client goes. Woken by this node's applies
// (Watcher), it re-checks its own state, since a wake-up may concern
// entries at or below after (a follower catching up). It decides nothing:
// the caller then reads as usual (linearizably unless stale), so parking on
// a follower costs the leader nothing until the answer.
func (s *Server) park(ctx context.Context, k watchKey, after uint64, wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	wt, _ := s.store.(Watcher)
	for {
		var woken <-chan struct{}
		cancel := func() {}
		if wt != nil {
			woken, cancel = k.watch(wt) // before the check: no change slips between
		}
		m, err := s.store.Read(ctx, true)
		if err != nil || k.indexOf(m) > after {
			cancel()
			return // an error is the read's to answer
		}
		var poll <-chan time.Time
		if wt == nil {
			poll = time.After(watchPoll)
		}
		select {
		case <-woken:
		case <-poll:
		case <-timer.C:
			cancel()
			return
		case <-ctx.Done():
			cancel()
			return
		}
		cancel()
	}
}

// read answers from this node's state when ?stale=true, else linearizably
// from the leader. With ?index=N it is a blocking read: it first parks on
// this node until k's index passes N or wait_ms runs out (park); reads
// with no k (sessions, semaphores) do not block, and refuse index. A read
// forwarded by another node does not park again: that node did. Every
// answer carries the index in X-Raftlock-Index; view's error (a 404) is
// answered instead.
func (s *Server) read(w http.ResponseWriter, r *http.Request, k *watchKey, view func(nodeapi.LockReader) (any, uint64, error)) {
	q, err := query(r)
	if err != nil {
		writeError(w, err)
		return
	}
	stale := false
	if v := q.Get("stale"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, badRequest("stale: must be true or false"))
			return
		}
		stale = b
	}
	after, wait, block, err := blocking(q)
	if err == nil && block && k == nil {
		err = badRequest("index: blocking reads are for locks only")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if block && r.Header.Get(api.HeaderForwardedBy) == "" {
		h, err := s.takeRead(r.Context(), *k)
		if err != nil {
			writeError(w, err)
			return
		}
		defer h.Release()
		s.park(r.Context(), *k, after, wait)
		if r.Context().Err() != nil {
			return // the client went away
		}
	}
	s.onLeader(w, r, nil, func(ctx context.Context) (int, any, error) {
		m, err := s.store.Read(ctx, stale)
		if unknownOutcome(err) {
			// A read applies nothing: its timeout is "no leader in time".
			return 0, nil, &apiError{http.StatusServiceUnavailable, api.CodeNoLeader, "no answer from the leader in time: " + err.Error()}
		}
		if err != nil {
			return 0, nil, err
		}
		body, idx, err := view(m)
		if err != nil {
			return 0, nil, err
		}
		w.Header().Set(api.HeaderIndex, strconv.FormatUint(idx, 10))
		return http.StatusOK, body, nil
	})
}

// forceRelease ends whatever lease holds the lock (admin only; any caller
// with tokens off, as for every admin route). The leader refuses it with
// 503 not_supported_yet until every node reads command format 3. The node
// that decides logs it with the caller's token name.
func (s *Server) forceRelease(ctx context.Context, req *releaseRequest) (int, any, error) {
	if !s.callerMay(ctx, RoleAdmin) {
		return 0, nil, &apiError{http.StatusForbidden, api.CodeForbidden, "a force release needs an admin token"}
	}
	cmd := fsm.Command{Op: fsm.OpForceRelease, Name: req.Name}
	res, err := s.applyGated(ctx, cmd)
	if err != nil {
		return 0, nil, err
	}
	if res.Status != fsm.StatusOK {
		return outcome(res, cmd)
	}
	by := callerName(ctx)
	if by == "" {
		by = "(tokens off)"
	}
	if res.Lock.Token == 0 {
		s.log.Info("force release: no lease held the lock", "lock", req.Name, "by", by)
		return http.StatusOK, api.Released{Released: false}, nil
	}
	s.log.Warn("force release: ended a lease", "lock", req.Name, "by", by,
		"holder", res.Lock.Owner, "fencing_token", res.Lock.Token, "lock_delay_ms", res.Lock.LockDelay)
	return http.StatusOK, api.Released{Released: true, Holder: &api.Holder{Owner: res.Lock.Owner, FencingToken: res.Lock.Token}}, nil
}
