package httpapi

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/admission"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// TenantCaps bound how far one tenant (the token's name; without tokens a
// lock name's first segment, and "-" for sessions: see tenantOf) may ramp
// what it holds for long: sessions, parked acquires and parked blocking
// reads. Each over its cap is refused at once with 429 overloaded and
// retry_after_ms. They stand beside admission (admission.go), which shares
// the commit pipeline and the leader's wait budget by load: these are
// fixed, so one tenant's ramp ends at a known number of goroutines,
// request slots and bytes whatever the others do. Zero values take the
// defaults.
//
// Parked acquires and blocking reads each hold one of the node's
// Limits.MaxInflight request slots while they wait, so the defaults keep
// one tenant's waits and reads together at half of them: other tenants'
// requests find a slot while one tenant ramps.
type TenantCaps struct {
	// Sessions is how many live sessions a tenant may have created through
	// the leader; 0: DefaultTenantSessions. Counted by the leader since it
	// took leadership: a new leader does not know who created the sessions
	// it inherits, so after a failover a tenant may hold up to its cap on
	// top of them until they end.
	Sessions int
	// Waits is how many acquires (of locks and semaphores) with wait_ms a
	// tenant may have parked on the leader; 0: DefaultTenantWaits.
	Waits int
	// BlockingReads is how many blocking reads (?index=, of a lock or a
	// list) a tenant may have parked on this node; 0:
	// DefaultTenantBlockingReads. Counted per node: a blocking read parks
	// on the node that received it.
	BlockingReads int
}

// Defaults of TenantCaps.
const (
	DefaultTenantSessions      = 10_000
	DefaultTenantWaits         = 512
	DefaultTenantBlockingReads = 512
)

// tenantCaps is TenantCaps at work on one server.
type tenantCaps struct {
	sessions *admission.Members
	waits    *admission.Cap
	reads    *admission.Cap
	shed     *prometheus.CounterVec
}

func newTenantCaps(c TenantCaps, reg prometheus.Registerer) *tenantCaps {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Sessions, DefaultTenantSessions)
	def(&c.Waits, DefaultTenantWaits)
	def(&c.BlockingReads, DefaultTenantBlockingReads)
	tc := &tenantCaps{
		sessions: admission.NewMembers("sessions", c.Sessions, nil),
		waits:    admission.NewCap("acquires waiting", c.Waits, nil),
		reads:    admission.NewCap("blocking reads waiting", c.BlockingReads, nil),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftlock_tenant_cap_refusals_total",
			Help: "Requests refused with 429 because their tenant was at its cap, by cap (sessions, waits, blocking_reads).",
		}, []string{"cap"}),
	}
	reg.MustRegister(tc.shed)
	return tc
}

// takeWait takes a place among the tenant's parked acquires for an acquire
// of name that asks to wait, on the leader (nil elsewhere: the leader
// decides and counts). The caller releases it when the acquire is
// answered.
func (s *Server) takeWait(ctx context.Context, name string) (*admission.Held, error) {
	if !s.leading() {
		return nil, nil
	}
	h, shed := s.caps.waits.Take(tenantOf(ctx, name))
	if shed != nil {
		s.caps.shed.WithLabelValues("waits").Inc()
		return nil, capRefusal(shed)
	}
	return h, nil
}

// takeRead takes a place among the tenant's parked blocking reads on this
// node, for a read that will park on k.
func (s *Server) takeRead(ctx context.Context, k watchKey) (*admission.Held, error) {
	h, shed := s.caps.reads.Take(tenantOf(ctx, k.keys[0]))
	if shed != nil {
		s.caps.shed.WithLabelValues("blocking_reads").Inc()
		return nil, capRefusal(shed)
	}
	return h, nil
}

// reserveSession takes a place among the tenant's live sessions for a
// create on the leader (nil elsewhere). At the cap, sessions that have
// ended since (expired, or closed by another token) are forgotten first,
// read from the leader's state.
func (s *Server) reserveSession(ctx context.Context) (*admission.Reservation, error) {
	if !s.leading() {
		return nil, nil
	}
	var m nodeapi.LockReader
	alive := func(id string) bool {
		if m == nil {
			var err error
			if m, err = s.store.Read(ctx, true); err != nil {
				m = nil
				return true // cannot tell: keep counting it
			}
		}
		_, ok := m.Session(id)
		return ok
	}
	rs, shed := s.caps.sessions.Reserve(tenantOf(ctx, ""), alive)
	if shed != nil {
		s.caps.shed.WithLabelValues("sessions").Inc()
		return nil, overloaded(shed)
	}
	return rs, nil
}

// capRefusal is the 429 to a request over its tenant's cap, with the
// cap's retry time (pushback).
func capRefusal(shed *admission.CapShed) error {
	return &retryError{&apiError{http.StatusTooManyRequests, api.CodeOverloaded, shed.Error()}, shed.RetryAfter}
}
