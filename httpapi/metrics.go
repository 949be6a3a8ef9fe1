package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics counts requests by route template (never by lock name, which
// would grow without bound) and status.
type httpMetrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	shed      *prometheus.HistogramVec
	forwarded *prometheus.CounterVec
	// children holds each (route, method, status)'s series once resolved,
	// so that a request costs one map read, not four label hashings and
	// lookups and a strconv.
	children sync.Map // seriesKey -> *series
}

type seriesKey struct {
	route, method string
	status        int
}

// series are the two every answer updates; a 429's shed histogram and a
// relay's counter are looked up when they happen, so that no series shows
// before its first event.
type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// seriesFor returns the series of one route, method and status. The
// labels are bounded: routes are the router's templates, methods the
// routes', statuses the API's.
func (m *httpMetrics) seriesFor(route, method string, status int) *series {
	k := seriesKey{route, method, status}
	if c, ok := m.children.Load(k); ok {
		return c.(*series)
	}
	c := &series{
		requests: m.requests.WithLabelValues(route, method, strconv.Itoa(status)),
		latency:  m.latency.WithLabelValues(route, method),
	}
	v, _ := m.children.LoadOrStore(k, c)
	return v.(*series)
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftlock_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code (429: shed for overload).",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftlock_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route and method (includes wait_ms parking).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		// The 429s apart, on finer buckets: how fast the node refuses work
		// under overload is the point of shedding, and in the histogram
		// above they would hide among the writes they protect.
		shed: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftlock_http_shed_duration_seconds",
			Help:    "Time to answer a request shed with 429 overloaded, from the handler's start, by route and method.",
			Buckets: []float64{.00005, .0001, .0002, .0005, .001, .002, .005, .01, .02, .05, .1},
		}, []string{"route", "method"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftlock_http_forwarded_total",
			Help: "Requests this node relayed to the leader, by route.",
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.latency, m.shed, m.forwarded)
	return m
}

// instrumentRoute counts and times the requests of the route registered
// as route (its template).
func (m *httpMetrics) instrumentRoute(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(sw, r)
		took := time.Since(start).Seconds()
		c := m.seriesFor(route, r.Method, sw.status)
		c.latency.Observe(took)
		if sw.status == http.StatusTooManyRequests {
			m.shed.WithLabelValues(route, r.Method).Observe(took)
		}
		c.requests.Inc()
		if sw.forwarded {
			m.forwarded.WithLabelValues(route).Inc()
		}
	})
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status    int
	forwarded bool
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// markForwarded tells the metrics middleware, if any, that w was relayed.
func markForwarded(w http.ResponseWriter) {
	if sw, ok := w.(*statusWriter); ok {
		sw.forwarded = true
	}
}

// registerAdmissionMetrics exports the gate's state, and returns the counter
// of its decisions by tenant (top tenants by name, the rest "other").
func registerAdmissionMetrics(reg prometheus.Registerer, a *admitter) *prometheus.CounterVec {
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "raftlock_admission_requests_total",
		Help: "Writes the adaptive gate admitted or shed (429), by tenant (the busiest by name, the rest \"other\") and result.",
	}, []string{"tenant", "result"})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(results,
		gauge("raftlock_admission_limit", "The adaptive limit on client writes in flight through Raft.",
			func() float64 { return float64(a.limit.Current()) }),
		gauge("raftlock_admission_inflight", "Client writes admitted and in flight through Raft.",
			func() float64 { return float64(a.gate.InFlight()) }),
		gauge("raftlock_admission_tenants", "Tenants with writes in flight.",
			func() float64 { return float64(a.gate.Tenants()) }),
		gauge("raftlock_admission_baseline_latency_seconds", "The controller's estimate of the unloaded write latency.",
			func() float64 { b, _ := a.limit.Latencies(); return b.Seconds() }),
		gauge("raftlock_admission_recent_latency_seconds", "The average write latency of the controller's last window.",
			func() float64 { _, r := a.limit.Latencies(); return r.Seconds() }),
	)
	return results
}
