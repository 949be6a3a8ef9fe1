package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/admission"
)

// Admission tunes the adaptive limit on client writes entering Raft
// (internal/admission). It gates acquire, renew and release on the node
// that hands them to the store, the leader: a follower forwards without
// counting, so a write is counted once, where its latency is made. Leader
// ticks and grants to parked waiters are the node's own entries and never
// pass through here, so they are never shed. The node's static bound on
// pending applies stays as a hard ceiling behind it.
type Admission struct {
	// Disabled turns the gate off (only the static bound sheds).
	Disabled bool
	// Limit tunes the controller; see admission.Config.
	Limit admission.Config
	// TopTenants is how many tenants get their own metric label, the rest
	// being "other". 0: 10.
	TopTenants int
	// MaxWaiters is the budget of parked acquires (wait_ms > 0) shared
	// fairly between tenants (admission.Waiters). 0: DefaultMaxWaiters.
	// Keep it at most half the node's bound on parked acquires
	// (raftnode.Config.MaxWaiters), so that a tenant within its share is
	// not refused there because of the others.
	MaxWaiters int
}

// DefaultMaxWaiters is half of raftnode's default bound on parked acquires
// (100,000); see Admission.MaxWaiters.
const DefaultMaxWaiters = 50_000

// shedLogEvery bounds the admission log to one line per interval under a
// flood: a shed must cost next to nothing, and the counters say the rest.
const shedLogEvery = 10 * time.Second

// admitter is the gate of one server and its metrics.
type admitter struct {
	gate    *admission.Gate
	limit   *admission.Limit
	waiters *admission.Waiters
	labels  *admission.Labeler
	results *prometheus.CounterVec
	now     func() time.Time

	shedSince atomic.Int64 // sheds since the last log line
	lastLog   atomic.Int64 // unix nanoseconds of the last log line
}

func newAdmitter(cfg Admission, reg prometheus.Registerer) *admitter {
	if cfg.Disabled {
		return nil
	}
	if cfg.TopTenants <= 0 {
		cfg.TopTenants = 10
	}
	if cfg.MaxWaiters <= 0 {
		cfg.MaxWaiters = DefaultMaxWaiters
	}
	lim := admission.NewLimit(cfg.Limit)
	now := cfg.Limit.Now
	if now == nil {
		now = time.Now
	}
	a := &admitter{
		now:     now,
		gate:    admission.NewGate(lim, cfg.Limit.Now),
		limit:   lim,
		waiters: admission.NewWaiters(cfg.MaxWaiters),
		labels:  admission.NewLabeler(cfg.TopTenants, time.Minute, nil),
	}
	a.results = registerAdmissionMetrics(reg, a)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "raftlock_admission_waiters",
		Help: "Acquires waiting for a lock (wait_ms), as counted against their tenants' shares.",
	}, func() float64 { return float64(a.waiters.Total()) }))
	return a
}

// shed counts one refusal of tenant's write (result: "shed" for the
// in-flight gate, "shed_wait" for the waiter budget) and logs to log, at
// most once per shedLogEvery, how many there were.
func (a *admitter) shed(log hclog.Logger, tenant, result string) {
	a.results.WithLabelValues(a.labels.Label(tenant), result).Inc()
	n := a.shedSince.Add(1)
	now := a.now().UnixNano()
	last := a.lastLog.Load()
	if now-last < int64(shedLogEvery) || !a.lastLog.CompareAndSwap(last, now) {
		return
	}
	a.shedSince.Add(-n)
	log.Warn("admission: shedding writes with 429", "shed_since_last_line", n, "limit", a.limit.Current(), "in_flight", a.gate.InFlight(), "waiters", a.waiters.Total(), "tenant", tenant)
}

type tenantKey struct{}

// withTenant records the tenant authentication found (the token's name).
func withTenant(r *http.Request, name string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), tenantKey{}, name))
}

// noTenant is the tenant of lock names without a "/": they share one.
const noTenant = "-"

// tenantOf is whom a write counts against: the token's name when tokens
// are on, otherwise the first segment of the lock name ("orders" for
// "orders/42"). Names without a segment share one tenant, so a flood over
// many flat names is one tenant, not thousands with a share each.
func tenantOf(ctx context.Context, lock string) string {
	if name, ok := ctx.Value(tenantKey{}).(string); ok {
		return name
	}
	if seg, _, ok := strings.Cut(lock, "/"); ok && seg != "" {
		return seg
	}
	return noTenant
}

// leading reports whether this node is the leader, where writes are gated.
func (s *Server) leading() bool {
	id, _ := s.store.Leader()
	return id == s.store.ID()
}

// overloaded is the 429 answer to a shed write.
func overloaded(why error) error {
	return &apiError{http.StatusTooManyRequests, api.CodeOverloaded, why.Error()}
}

// admit takes a slot for a write of lock on this node, or answers why not.
// It returns a nil ticket, and no error, where the gate does not apply:
// when off, or when this node does not lead (the store will refuse, and
// the write is forwarded to the leader, which counts it).
func (s *Server) admit(ctx context.Context, lock string, priority bool) (*admission.Ticket, error) {
	if s.admission == nil || !s.leading() {
		return nil, nil
	}
	return s.admitTenant(tenantOf(ctx, lock), priority)
}

// admitTenant is admit on the leader, for a known tenant.
func (s *Server) admitTenant(tenant string, priority bool) (*admission.Ticket, error) {
	a := s.admission
	tk, shed := a.gate.Admit(tenant, priority)
	if shed != nil {
		a.shed(s.log, tenant, "shed")
		return nil, overloaded(shed)
	}
	a.results.WithLabelValues(a.labels.Label(tenant), "admitted").Inc()
	return tk, nil
}

// observable reports whether a store call that ended with res and err
// tells the controller about the commit pipeline's latency: a write that
// went through the log does (a grant, renew or release: status OK), and so
// does a timeout in it. A refusal does not: a held or not-holder answer may
// come from the leader's state without a log entry, far faster than a
// commit, and would pull the unloaded baseline down; nor does a refusal
// before the pipeline (not leader, the hard bound).
func observable(res fsm.Result, err error) bool {
	if err != nil {
		return unknownOutcome(err)
	}
	return res.Status == fsm.StatusOK
}

// applyGated runs one renew or release through the gate.
func (s *Server) applyGated(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	tk, err := s.admit(ctx, cmd.Name, true)
	if err != nil {
		return fsm.Result{}, err
	}
	res, err := s.store.Apply(ctx, cmd)
	if tk != nil {
		tk.Done(observable(res, err))
	}
	return res, err
}

// acquireGated runs an acquire through the gate. A parked wait must not
// hold a slot: parked acquires cost the pipeline nothing until their grant,
// which is the leader's own entry, and a slot held for up to wait_ms would
// let a few waiting clients shut everyone out and would feed the
// controller seconds of "latency" that are only waiting. So the admitted,
// measured part is a try without waiting; only if it finds the lock held
// does the acquire then wait, outside the gate. The try changes nothing
// when refused (held is decided without a log entry, or by one that grants
// nothing), and a parked acquire is still granted in arrival order from
// the moment it parks; what it costs is one more leadership check for an
// acquire that will wait.
//
// What a wait holds instead is a place in the tenant's share of parked
// acquires (admission.Waiters), taken first, before the try, and kept
// until the answer: a tenant at its share gets 429 at once, before any
// work, whether or not its lock would have been free; other tenants' waits
// are untouched.
func (s *Server) acquireGated(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	if wait > 0 {
		h, err := s.takeWait(ctx, cmd.Name) // the tenant's cap, admission or not
		if err != nil {
			return fsm.Result{}, err
		}
		defer h.Release()
	}
	a := s.admission
	if a == nil || !s.leading() {
		return s.store.Acquire(ctx, cmd, wait)
	}
	tenant := tenantOf(ctx, cmd.Name)
	if wait > 0 {
		p, err := s.parkTenant(tenant)
		if err != nil {
			return fsm.Result{}, err
		}
		defer p.Done()
	}
	tk, err := s.admitTenant(tenant, false)
	if err != nil {
		return fsm.Result{}, err
	}
	res, err := s.store.Acquire(ctx, cmd, 0)
	tk.Done(observable(res, err))
	// A full semaphore is what a held lock is to its waiters.
	if err != nil || wait <= 0 || (res.Status != fsm.StatusHeld && res.Status != fsm.StatusFull) {
		return res, err
	}
	return s.store.Acquire(ctx, cmd, wait)
}

// parkGated takes a place in the tenant's share of parked acquires for a
// wait on name (a lock's or a semaphore's), or answers 429 overloaded; the
// caller must call Done on the place (nil-safe) when the wait is answered.
// It returns nil and no error where the gate does not apply (off, or not
// the leader).
func (s *Server) parkGated(ctx context.Context, name string) (*admission.Parked, error) {
	if s.admission == nil || !s.leading() {
		return nil, nil
	}
	return s.parkTenant(tenantOf(ctx, name))
}

func (s *Server) parkTenant(tenant string) (*admission.Parked, error) {
	a := s.admission
	p, shed := a.waiters.Park(tenant)
	if shed != nil {
		a.shed(s.log, tenant, "shed_wait")
		return nil, overloaded(shed)
	}
	return p, nil
}

// Paths of the gated writes, for shedEarly.
const (
	pathAcquire = "/v1/locks/acquire"
	pathRenew   = "/v1/locks/renew"
	pathRelease = "/v1/locks/release"
	pathUpdate  = "/v1/locks/update"

	pathSemAcquire = "/v1/semaphores/acquire"
	pathSemRenew   = "/v1/semaphores/renew"
	pathSemRelease = "/v1/semaphores/release"
)

// shedEarly answers 429 at once, and reports true, for a write that the
// gate (or the waiter budget, or the tenant's cap on waits) would shed now: it runs on the raw body,
// before the strict parse and validation, which under a flood are most of
// what a refusal costs. The tenant is the token's name, or the lock name
// picked out of the body by peekLockFields; a body it cannot read cheaply
// (escapes in the name, not an object) is left to the full path, which
// decides as before. It takes no slot: a write it lets pass is admitted or
// shed by admit, after the parse. A malformed body from a tenant over its
// share may thus get 429 rather than 400; either promises nothing applied.
func (s *Server) shedEarly(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if r.Method != http.MethodPost {
		return false
	}
	priority := true
	switch r.URL.Path {
	case pathAcquire, pathSemAcquire:
		priority = false
	case pathRenew, pathRelease, pathUpdate, pathSemRenew, pathSemRelease:
	default:
		return false // session writes name no lock: admit decides after the parse
	}
	name, waits, ok := peekLockFields(body)
	if !ok || !s.leading() {
		return false
	}
	if ps := scopeOf(r.Context()); ps != nil && !inScope(ps, string(name)) {
		return false // the full path answers 403, which says more than a 429
	}
	tenant, byToken := r.Context().Value(tenantKey{}).(string)
	if !byToken {
		tenant = noTenant
		if i := bytes.IndexByte(name, '/'); i > 0 {
			tenant = string(name[:i])
		}
	}
	if waits && !priority {
		if shed := s.caps.waits.Check(tenant); shed != nil {
			s.caps.shed.WithLabelValues("waits").Inc()
			writeError(w, capRefusal(shed))
			return true
		}
	}
	a := s.admission
	if a == nil {
		return false
	}
	var why error
	if ws := a.waiters.Check(tenant); waits && !priority && ws != nil {
		a.shed(s.log, tenant, "shed_wait")
		why = ws
	} else if gs := a.gate.Check(tenant, priority); gs != nil {
		a.shed(s.log, tenant, "shed")
		why = gs
	} else {
		return false
	}
	writeError(w, overloaded(why))
	return true
}

// peekLockFields picks "name" and whether "wait_ms" is non-zero out of a
// JSON object without decoding it (no allocation): enough to know whom a
// write counts against before paying for the strict parse. ok is false
// when the body is not an object with a "name" string free of escapes, or
// is malformed in a way the scan notices; the caller then parses as usual.
func peekLockFields(b []byte) (name []byte, waits, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false, false
	}
	i++
	for {
		i = skipSpace(b, i)
		if i < len(b) && b[i] == '}' {
			return name, waits, name != nil
		}
		key, j, plain := plainString(b, i)
		if !plain {
			return nil, false, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return nil, false, false
		}
		i = skipSpace(b, i+1)
		switch string(key) {
		case "name":
			if name, i, plain = plainString(b, i); !plain {
				return nil, false, false
			}
		case "wait_ms":
			j = i
			for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
				waits = waits || b[j] >= '1' && b[j] <= '9'
				j++
			}
			i = j
		default:
			if i = skipValue(b, i); i < 0 {
				return nil, false, false
			}
		}
		i = skipSpace(b, i)
		switch {
		case i < len(b) && b[i] == ',':
			i++
		case i < len(b) && b[i] == '}':
			return name, waits, name != nil
		default:
			return nil, false, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at b[i] that has no escapes: its
// contents and the index after it.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	end := bytes.IndexByte(b[i+1:], '"')
	if end < 0 {
		return nil, i, false
	}
	s := b[i+1 : i+1+end]
	if bytes.IndexByte(s, '\\') >= 0 {
		return nil, i, false
	}
	return s, i + end + 2, true
}

// skipValue returns the index after the JSON value at b[i] (objects and
// arrays by depth, strings with escapes), or -1.
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i++
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(b) {
				return -1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
		if depth == 0 && i < len(b) && (b[i-1] == '"' || b[i-1] == '}' || b[i-1] == ']') {
			return i
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}
