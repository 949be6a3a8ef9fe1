package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	gometrics "github.com/hashicorp/go-metrics/compat"
	promsink "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/internal/heapfloor"
	"github.com/raftlock/raftlock/raftnode"
)

const serveUsage = `Usage: raftlock serve [flags]

Runs one raftlock node. Every flag also reads RAFTLOCK_<FLAG> from the
environment (RAFTLOCK_HTTP_ADDR, ...); the command line wins.

Examples:
  raftlock serve --dev
  raftlock serve --id n1 --data-dir /var/lib/raftlock --http-addr 127.0.0.1:8001 \
      --raft-addr 127.0.0.1:9001 --peers n1=127.0.0.1:9001,n2=127.0.0.1:9002,n3=127.0.0.1:9003
  raftlock serve --id n4 --data-dir d4 --http-addr 127.0.0.1:8004 --raft-addr 127.0.0.1:9004 \
      --join http://127.0.0.1:8001
  raftlock serve ... --tls-cert n1.pem --tls-key n1-key.pem --tls-ca ca.pem --auth-tokens tokens
      (HTTPS API, mutual TLS between nodes, bearer tokens; scripts/certs.sh makes the files)

Flags:
`

// serveConfig is what the serve flags say.
type serveConfig struct {
	node        raftnode.Config
	httpAddr    string
	dev         bool
	tempDir     bool // the data dir is a temporary one --dev made: remove it on exit
	logLevel    string
	logJSON     bool
	debugAddr   string
	probeAddr   string
	bodyTimeout time.Duration // time to receive a request body; 0: httpapi's default
	stopTimeout time.Duration // SIGTERM to exit, at most
	admission   admissionFlags
	caps        httpapi.TenantCaps
	memoryLimit int64 // soft limit on the Go runtime's memory, bytes; 0: GOMEMLIMIT or none
	gcMinHeap   int64 // the heap a collection waits for while the live heap is smaller, bytes; 0: Go's own pacing

	apiTLS     *tls.Config     // HTTPS server config; nil: plain HTTP
	forwardTLS *tls.Config     // client config for the node's calls to other nodes' API: forwarding, join, progress
	tokens     *httpapi.Tokens // nil: no authentication
	nodeToken  string          // admin token the node's own join, announce and progress calls carry
}

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	var peers string
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	fs.StringVar(&c.node.ID, "id", "", "this node's id, unique in the cluster")
	fs.StringVar(&c.node.DataDir, "data-dir", "", "directory for the Raft log, stable store and snapshots")
	fs.StringVar(&c.node.LogStore, "log-store", raftnode.DefaultLogStore, "where the Raft log lives: wal (DATA/wal) or boltdb (raft.db); a log found in the other is moved there on start")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8001", "HTTP API listen address")
	fs.StringVar(&c.node.RaftAddr, "raft-addr", "127.0.0.1:9001", "Raft transport listen address")
	fs.StringVar(&c.node.AdvertiseHTTP, "advertise-http", "", "HTTP address other nodes dial (default: --http-addr)")
	fs.StringVar(&c.node.AdvertiseRaft, "advertise-raft", "", "Raft address other nodes dial (default: --raft-addr)")
	fs.StringVar(&peers, "peers", "", "initial voters id=raft_addr,...; used only on an empty data dir")
	fs.StringVar(&c.node.Join, "join", "", "HTTP URL of a running node to join through (empty data dir)")
	fs.BoolVar(&c.dev, "dev", false, "one node with a fresh temporary data dir on 127.0.0.1:8001")
	fs.StringVar(&c.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&c.logJSON, "log-json", false, "log as JSON lines")
	fs.StringVar(&c.probeAddr, "probe-addr", "", "also serve GET /healthz and /readyz, and nothing else, in plain HTTP on this address (e.g. 127.0.0.1:8081), for orchestrators: there a probe waits behind no client's connection or TLS handshake; off when empty")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "serve Go's /debug/pprof on this address (e.g. 127.0.0.1:6060); off when empty, never on the API port")
	fs.DurationVar(&c.bodyTimeout, "http-body-timeout", 10*time.Second, "time a client has to send a request body once its headers are in")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 20*time.Second, "after SIGTERM or SIGINT, exit (status 1) after at most this long even if the graceful stop has not finished")
	fs.DurationVar(&c.node.ElectionTimeout, "election-timeout", time.Second, "Raft election timeout")
	fs.DurationVar(&c.node.HeartbeatTimeout, "heartbeat-timeout", time.Second, "Raft heartbeat timeout")
	fs.Uint64Var(&c.node.SnapshotThreshold, "snapshot-threshold", 8192, "log entries between snapshots")
	fs.Uint64Var(&c.node.TrailingLogs, "trailing-logs", 10240, "log entries kept after a snapshot")
	fs.DurationVar(&c.node.SnapshotInterval, "snapshot-interval", 30*time.Second, "how often Raft checks the snapshot threshold")
	fs.DurationVar(&c.node.StateCheckInterval, "state-check-interval", raftnode.DefaultStateCheckInterval, "how often the leader compares every replica's state hash with its own (negative: never; 'raftlock cluster check-state' runs one now)")
	fs.IntVar(&c.node.MaxPendingApplies, "max-pending-applies", 1024, "client writes in flight through Raft before more are shed with 429 (the hard ceiling behind --admission)")
	fs.BoolVar(&c.admission.on, "admission", true, "shed writes with 429 past an adaptive limit driven by commit latency, shared fairly between tenants (docs/OPERATIONS.md: Admission control)")
	fs.IntVar(&c.admission.Limit.Min, "admission-min", 64, "the adaptive limit's floor: writes in flight it always allows (64: below it, shedding on a loaded 2-core node cost more CPU than it saved)")
	fs.IntVar(&c.admission.Limit.Max, "admission-max", 256, "the adaptive limit's ceiling; keep it under --max-pending-applies / 2")
	fs.Float64Var(&c.admission.Limit.Tolerance, "admission-tolerance", 2, "commit latency, as a multiple of the unloaded one, past which the limit shrinks")
	fs.Func("memory-limit", "soft limit on the node's Go memory, e.g. 640MiB (GOMEMLIMIT's syntax: B, KiB, MiB, GiB, TiB); the GC works harder near it, so a node holding 1M locks stays under 1 GiB RSS (docs/OPERATIONS.md: The data dir and the log stores)", func(v string) error {
		n, err := parseBytes(v)
		c.memoryLimit = n
		return err
	})
	c.gcMinHeap = defaultGCMinHeap
	fs.Func("gc-min-heap", "the Go heap may grow to this size before a collection while the live heap is smaller, e.g. 64MiB; 0: Go's own pacing (GOGC), which collected a busy node's few MiB about 14 times a second (docs/OPERATIONS.md: The data dir and the log stores)", func(v string) error {
		if v == "0" {
			c.gcMinHeap = 0
			return nil
		}
		n, err := parseBytes(v)
		c.gcMinHeap = n
		return err
	})
	fs.IntVar(&c.admission.MaxWaiters, "admission-max-waiters", 0, "parked acquires (wait_ms) shared fairly between tenants on the leader; 0: 50,000, half the node's bound")
	fs.IntVar(&c.caps.Sessions, "tenant-max-sessions", httpapi.DefaultTenantSessions, "live sessions one tenant (token name; without tokens all sessions are one tenant) may create through the leader; more are 429")
	fs.IntVar(&c.caps.Waits, "tenant-max-waits", httpapi.DefaultTenantWaits, "acquires with wait_ms one tenant may have parked on the leader; more are 429")
	fs.IntVar(&c.caps.BlockingReads, "tenant-max-blocking-reads", httpapi.DefaultTenantBlockingReads, "blocking reads (?index=) one tenant may have parked on this node; more are 429")
	fs.Uint64Var(&c.node.ReadyMaxLag, "ready-max-lag", raftnode.DefaultReadyMaxLag, "a follower this many entries behind the leader's commit index is not ready (/readyz)")
	fs.BoolFunc("send-ahead", "the leader sends a new batch to idle followers before its own fdatasync instead of after it, so the two disk writes of an acquire overlap (default true; docs/PERFORMANCE.md: Send-ahead)", func(v string) error {
		on, err := strconv.ParseBool(v)
		c.node.NoSendAhead = !on
		return err
	})
	fs.BoolVar(&c.node.AllowLostVoteRecord, "allow-lost-vote-record", false, "start although the data dir holds Raft state but raft.db lost its vote record (risk: two leaders in one term)")
	sec := addSecurityFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := applyEnv(fs, getenv); err != nil {
		return c, err
	}
	p, err := parsePeers(peers)
	if err != nil {
		return c, err
	}
	c.node.Peers = p
	if err := sec.apply(&c); err != nil {
		return c, err
	}
	if c.stopTimeout <= 0 {
		return c, errors.New("--stop-timeout must be positive")
	}
	if c.dev {
		if c.node.ID == "" {
			c.node.ID = "dev"
		}
		if c.node.DataDir == "" {
			dir, err := os.MkdirTemp("", "raftlock-dev-")
			if err != nil {
				return c, fmt.Errorf("--dev: temporary data dir: %w", err)
			}
			c.node.DataDir, c.tempDir = dir, true
		}
		if len(c.node.Peers) == 0 && c.node.Join == "" {
			c.node.Peers = map[string]string{c.node.ID: advertiseOr(c.node.AdvertiseRaft, c.node.RaftAddr)}
		}
	}
	switch {
	case c.node.ID == "":
		return c, errors.New("--id is required (or --dev)")
	case c.node.DataDir == "":
		return c, errors.New("--data-dir is required (or --dev)")
	case !raftnode.ValidLogStore(c.node.LogStore):
		return c, fmt.Errorf("--log-store must be %s or %s, not %q", raftnode.LogStoreWAL, raftnode.LogStoreBoltDB, c.node.LogStore)
	case len(c.node.Peers) > 0 && c.node.Join != "":
		return c, errors.New("--peers and --join exclude each other")
	}
	if c.node.AdvertiseHTTP == "" {
		c.node.AdvertiseHTTP = c.httpAddr
	}
	for flagName, addr := range map[string]string{"--advertise-http": c.node.AdvertiseHTTP, "--advertise-raft": advertiseOr(c.node.AdvertiseRaft, c.node.RaftAddr)} {
		if host, _, err := net.SplitHostPort(addr); err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
			return c, fmt.Errorf("%s: %q is not an address other nodes can dial; set %s", flagName, addr, flagName)
		}
	}
	if hclog.LevelFromString(c.logLevel) == hclog.NoLevel {
		return c, fmt.Errorf("--log-level: unknown level %q", c.logLevel)
	}
	return c, nil
}

// newRegistry gathers what /metrics serves: the node's lock and Raft state,
// hashicorp/raft's own metrics through a Prometheus sink, and the Go runtime.
func newRegistry(node *raftnode.Node) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(node.Collectors()...)
	sink, err := promsink.NewPrometheusSinkFrom(promsink.PrometheusOpts{Registerer: reg, Name: "raftlock_raft"})
	if err != nil {
		return nil, fmt.Errorf("raft metrics sink: %w", err)
	}
	conf := gometrics.DefaultConfig("raftlock")
	conf.EnableHostname = false
	conf.EnableRuntimeMetrics = false // the Go collector covers them
	// No go-metrics filter: it would join every key of every call into a
	// string to look it up; raftSink drops the per-entry keys itself.
	if _, err := gometrics.NewGlobal(conf, raftSink{sink}); err != nil {
		return nil, fmt.Errorf("raft metrics: %w", err)
	}
	return reg, nil
}

// raftSink passes hashicorp/raft's metrics to the Prometheus sink, except
// those raftnode.DropRaftMetric names: they fire on every write.
type raftSink struct{ next gometrics.MetricSink }

func (s raftSink) SetGauge(key []string, val float32) {
	if !raftnode.DropRaftMetric(key) {
		s.next.SetGauge(key, val)
	}
}

func (s raftSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	if !raftnode.DropRaftMetric(key) {
		s.next.SetGaugeWithLabels(key, val, labels)
	}
}

func (s raftSink) EmitKey(key []string, val float32) {
	if !raftnode.DropRaftMetric(key) {
		s.next.EmitKey(key, val)
	}
}

func (s raftSink) IncrCounter(key []string, val float32) {
	if !raftnode.DropRaftMetric(key) {
		s.next.IncrCounter(key, val)
	}
}

func (s raftSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if !raftnode.DropRaftMetric(key) {
		s.next.IncrCounterWithLabels(key, val, labels)
	}
}

func (s raftSink) AddSample(key []string, val float32) {
	if !raftnode.DropRaftMetric(key) {
		s.next.AddSample(key, val)
	}
}

func (s raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	if !raftnode.DropRaftMetric(key) {
		s.next.AddSampleWithLabels(key, val, labels)
	}
}

func advertiseOr(advertise, listen string) string {
	if advertise != "" {
		return advertise
	}
	return listen
}

func serve(args []string, stderr io.Writer) int {
	cfg, err := parseServe(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "raftlock serve: %v\n", err)
		return exitUsage
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name: "raftlock", Level: hclog.LevelFromString(cfg.logLevel), JSONFormat: cfg.logJSON, Output: stderr,
		TimeFn: logTime, // debug_*.go: the fault clock's wall time in a fault build
	})
	cfg.node.Logger = logger.With("node", cfg.node.ID)
	if err := runNode(cfg, logger); err != nil {
		fmt.Fprintf(stderr, "raftlock serve: %v\n", err)
		return exitError
	}
	return exitOK
}

// runNode serves until SIGTERM or SIGINT, then hands leadership over, stops
// serving and returns nil.
func runNode(cfg serveConfig, logger hclog.Logger) error {
	if cfg.tempDir {
		defer os.RemoveAll(cfg.node.DataDir)
	}
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		return fmt.Errorf("http address %s: %w", cfg.httpAddr, err)
	}
	defer ln.Close()
	cfg.node.Clock = nodeClock(cfg.node.Clock) // debug_*.go: the fault clock in a fault build
	if cfg.memoryLimit > 0 {
		debug.SetMemoryLimit(cfg.memoryLimit)
	}
	defer heapfloor.Keep(uint64(cfg.gcMinHeap))()
	// raftnode speaks no HTTP: a node announces itself (and joins) through
	// the API, and the leader asks joined nodes for their progress there.
	cfg.node.Announce = httpapi.Joiner(cfg.forwardTLS, cfg.nodeToken)
	cfg.node.FetchProgress = httpapi.ProgressFetcher(cfg.forwardTLS, cfg.nodeToken)
	node, err := raftnode.New(cfg.node)
	if err != nil {
		return err
	}
	reg, err := newRegistry(node)
	if err != nil {
		node.Close()
		return err
	}
	// The API's limits (slow bodies, header size, connection and in-flight
	// caps) come with its server and listener; see httpapi/limits.go.
	api := httpapi.New(node, httpapi.Options{Logger: logger, Registry: reg, Tokens: cfg.tokens, ForwardTLS: cfg.forwardTLS,
		Limits: httpapi.Limits{BodyTimeout: cfg.bodyTimeout}, Admission: cfg.admission.options(), Caps: cfg.caps})
	srv := api.HTTPServer(cfg.apiTLS)
	ln = api.Listener(ln)
	if cfg.debugAddr != "" {
		if err := serveDebug(cfg.debugAddr, logger); err != nil {
			node.Close()
			return err
		}
	}
	serveErr := make(chan error, 2)
	var probeSrv *http.Server
	if cfg.probeAddr != "" {
		pln, err := net.Listen("tcp", cfg.probeAddr)
		if err != nil {
			node.Close()
			return fmt.Errorf("probe address %s: %w", cfg.probeAddr, err)
		}
		probeSrv = api.ProbeServer()
		go func() { serveErr <- probeSrv.Serve(api.ProbeListener(pln)) }()
		logger.Info("serving probes", "addr", pln.Addr().String())
	}
	go func() {
		if cfg.apiTLS != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	logger.Info("serving", "id", cfg.node.ID, "http", cfg.scheme()+"://"+cfg.httpAddr, "raft", cfg.node.RaftAddr,
		"raft_mtls", cfg.node.RaftTLS != nil, "auth", cfg.tokens != nil, "data_dir", cfg.node.DataDir)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	select {
	case s := <-sig:
		logger.Info("shutting down", "signal", s.String(), "stop_timeout", cfg.stopTimeout)
	case err := <-serveErr:
		node.Close()
		return fmt.Errorf("http server: %w", err)
	}
	// A node that cannot stop (raft wedged under it) still ends: what it
	// acknowledged is in its durable log, as after a crash.
	defer stopWatchdog(time.After(cfg.stopTimeout), func() {
		logger.Error("the node did not stop within --stop-timeout; exiting without finishing (the data dir is as after a crash)",
			"stop_timeout", cfg.stopTimeout)
		os.Exit(exitError)
	})()
	shutdownErr := node.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	if probeSrv != nil {
		probeSrv.Shutdown(ctx)
	}
	if shutdownErr != nil {
		logger.Warn("raft shutdown", "error", shutdownErr)
	}
	return nil
}

// stopWatchdog calls expire when deadline fires, unless the returned stop
// is called first; stop returns once the watchdog is gone.
func stopWatchdog(deadline <-chan time.Time, expire func()) (stop func()) {
	stopped, gone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(gone)
		select {
		case <-stopped:
		case <-deadline:
			expire()
		}
	}()
	return func() {
		close(stopped)
		<-gone
	}
}

// serveDebug serves net/http/pprof on its own listener, so profiles are
// never reachable through the API port (nor its auth).
func serveDebug(addr string, logger hclog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	addDebugRoutes(mux, logger) // debug_*.go: /debug/clock in a fault build only
	go http.Serve(ln, mux)
	logger.Info("serving pprof", "addr", ln.Addr().String())
	return nil
}

// defaultGCMinHeap is --gc-min-heap's default: a node's live heap is a
// few MiB, and 64 MiB more is little beside what a server has.
const defaultGCMinHeap = 64 << 20

// parseBytes reads a size as GOMEMLIMIT writes one: an integer with an
// optional unit B, KiB, MiB, GiB or TiB.
func parseBytes(v string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := v, uint(0)
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			num, shift = strings.TrimSuffix(v, u.suffix), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is not a size such as 640MiB", v)
	}
	return n << shift, nil
}
