package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

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
}

// admitter is the gate of one server and its metrics.
type admitter struct {
	gate    *admission.Gate
	limit   *admission.Limit
	labels  *admission.Labeler
	results *prometheus.CounterVec
}

func newAdmitter(cfg Admission, reg prometheus.Registerer) *admitter {
	if cfg.Disabled {
		return nil
	}
	if cfg.TopTenants <= 0 {
		cfg.TopTenants = 10
	}
	lim := admission.NewLimit(cfg.Limit)
	a := &admitter{
		gate:   admission.NewGate(lim, cfg.Limit.Now),
		limit:  lim,
		labels: admission.NewLabeler(cfg.TopTenants, time.Minute, nil),
	}
	a.results = registerAdmissionMetrics(reg, a)
	return a
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

// admit takes a slot for a write of lock on this node, or answers why not.
// It returns a nil ticket, and no error, where the gate does not apply:
// when off, or when this node does not lead (the store will refuse, and
// the write is forwarded to the leader, which counts it).
func (s *Server) admit(ctx context.Context, lock string, priority bool) (*admission.Ticket, error) {
	a := s.admission
	if a == nil {
		return nil, nil
	}
	if id, _ := s.store.Leader(); id != s.store.ID() {
		return nil, nil
	}
	tenant := tenantOf(ctx, lock)
	label := a.labels.Label(tenant)
	tk, shed := a.gate.Admit(tenant, priority)
	if shed != nil {
		a.results.WithLabelValues(label, "shed").Inc()
		return nil, &apiError{http.StatusTooManyRequests, api.CodeOverloaded, shed.Error()}
	}
	a.results.WithLabelValues(label, "admitted").Inc()
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
func (s *Server) acquireGated(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	tk, err := s.admit(ctx, cmd.Name, false)
	if err != nil {
		return fsm.Result{}, err
	}
	if tk == nil {
		return s.store.Acquire(ctx, cmd, wait)
	}
	res, err := s.store.Acquire(ctx, cmd, 0)
	tk.Done(observable(res, err))
	if err != nil || wait <= 0 || res.Status != fsm.StatusHeld {
		return res, err
	}
	return s.store.Acquire(ctx, cmd, wait)
}
