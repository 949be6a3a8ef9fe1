package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/raftnode/tlsconfig"
)

// defaultEndpoint is where the CLI looks for a cluster when neither
// --endpoints nor RAFTLOCK_ENDPOINTS says.
const defaultEndpoint = "http://127.0.0.1:8001"

// env is a command's environment as KEY=VALUE entries (os.Environ()).
type env []string

// get returns the value of key; the last entry wins, as in os/exec.
func (e env) get(key string) string {
	for i := len(e) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(e[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// command is one CLI command: it runs with its arguments, output streams and
// environment, and returns the process's exit code.
type command func(args []string, stdout, stderr io.Writer, environ env) int

// subcommands runs the subcommand args[0] of group (cluster, snapshot), or
// prints the group's help.
func subcommands(group, help string, subs map[string]command, args []string, stdout, stderr io.Writer, environ env) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "raftlock %s: missing subcommand (see raftlock %s --help)\n", group, group)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, help)
		return exitOK
	}
	sub, ok := subs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "raftlock %s: unknown subcommand %q (see raftlock %s --help)\n", group, args[0], group)
		return exitUsage
	}
	return sub(args[1:], stdout, stderr, environ)
}

// conn holds the flags every command that talks to the cluster has.
type conn struct {
	endpoints string
	timeout   time.Duration
	json      bool
	tls       tlsconfig.Files // --ca, --cert, --key
	token     string
	tokenFile string
}

func addConnFlags(fs *flag.FlagSet, timeout time.Duration, withJSON bool) *conn {
	c := &conn{}
	fs.StringVar(&c.endpoints, "endpoints", defaultEndpoint, "comma-separated node URLs; any node of the cluster will do")
	fs.DurationVar(&c.timeout, "timeout", timeout, "give up after this long (the cluster unreachable or without a leader: exit 5)")
	if withJSON {
		fs.BoolVar(&c.json, "json", false, "print JSON (the API's shapes) instead of text")
	}
	fs.StringVar(&c.tls.CA, "ca", "", "PEM CA of the cluster's certificates: speak https (default endpoint https://127.0.0.1:8001)")
	fs.StringVar(&c.tls.Cert, "cert", "", "PEM client certificate, for a cluster run with --tls-verify-clients (with --key)")
	fs.StringVar(&c.tls.Key, "key", "", "PEM private key of --cert")
	fs.StringVar(&c.token, "token", "", "bearer token; prefer RAFTLOCK_TOKEN or --token-file, since others can read a command line")
	fs.StringVar(&c.tokenFile, "token-file", "", "file whose first line is the bearer token")
	return c
}

func (c *conn) endpointList() []string {
	var eps []string
	list := c.endpoints
	if list == defaultEndpoint && c.tls.CA != "" {
		list = "https" + strings.TrimPrefix(defaultEndpoint, "http")
	}
	for _, ep := range strings.Split(list, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// client returns a client for the endpoints; an error is a usage error.
func (c *conn) client() (*client.Client, error) {
	if c.timeout <= 0 {
		return nil, errors.New("--timeout must be positive")
	}
	opts := []client.Option{client.WithRequestTimeout(c.timeout)}
	if c.tls.CA != "" || c.tls.Cert != "" || c.tls.Key != "" {
		b, err := tlsconfig.Load(c.tls)
		if err != nil {
			return nil, fmt.Errorf("--ca/--cert/--key: %w", err)
		}
		opts = append(opts, client.WithTLSConfig(b.Client()))
	}
	token := c.token
	if c.tokenFile != "" {
		if token != "" {
			return nil, errors.New("--token and --token-file exclude each other")
		}
		data, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token, _, _ = strings.Cut(string(data), "\n")
		if token = strings.TrimSpace(token); token == "" {
			return nil, fmt.Errorf("--token-file %s: empty first line", c.tokenFile)
		}
	}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	return client.New(c.endpointList(), opts...)
}

// ctx bounds a command's calls by --timeout.
func (c *conn) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

// cli is one run of a command: its name, streams and flags, and how it
// reports failures.
type cli struct {
	name           string // "acquire", "cluster join", ...
	stdout, stderr io.Writer
	help           string // usage text, printed before the flags
	fs             *flag.FlagSet
	conn           *conn           // nil for commands that do not talk to the cluster
	given          map[string]bool // flags given on the command line (not from the environment)
	// flagsFirst: flags end at the first positional argument (exec without
	// "--", where the command's own flags follow NAME).
	flagsFirst bool
	// badFlag is the last flag value refused, in flag terms (durationFlag).
	badFlag error
}

func newCLI(name, help string, stdout, stderr io.Writer) *cli {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors are reported in one line by parse
	fs.Usage = func() {}
	return &cli{name: name, help: help, stdout: stdout, stderr: stderr, fs: fs}
}

// parse parses args, in which flags may come before, between or after the
// positional arguments (up to a "--"), fills every flag not given from
// RAFTLOCK_<FLAG> in environ, and checks that there are min to max
// positional arguments (max < 0: no limit). When it returns ok false, the
// command exits with code.
func (c *cli) parse(args []string, environ env, min, max int) (pos []string, code int, ok bool) {
	wrapDurations(c.fs, &c.badFlag)
	var err error
	if c.flagsFirst {
		if err = c.fs.Parse(args); err == nil {
			pos = c.fs.Args()
		}
	} else {
		pos, err = parseInterspersed(c.fs, args)
	}
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp()
		return nil, exitOK, false
	}
	if err != nil && c.badFlag != nil {
		err = c.badFlag
	}
	if err == nil {
		c.given = map[string]bool{}
		c.fs.Visit(func(f *flag.Flag) { c.given[f.Name] = true })
		err = applyEnv(c.fs, environ.get)
	}
	if err == nil {
		switch {
		case len(pos) < min:
			u, _, _ := strings.Cut(strings.TrimPrefix(c.help, "Usage: "), "\n")
			err = fmt.Errorf("missing arguments: usage: %s", u)
		case max >= 0 && len(pos) > max:
			err = fmt.Errorf("unexpected argument %q", pos[max])
		default:
			// A required argument given as "" (an unset shell variable, say)
			// is as missing as one not given.
			for i := range min {
				if pos[i] == "" {
					u, _, _ := strings.Cut(strings.TrimPrefix(c.help, "Usage: "), "\n")
					err = fmt.Errorf("argument %d is empty: usage: %s", i+1, u)
					break
				}
			}
		}
	}
	if err != nil {
		return nil, c.usageError(err), false
	}
	return pos, exitOK, true
}

// parseInterspersed parses flags anywhere in args and returns the
// positional arguments in order; everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func (c *cli) printHelp() {
	fmt.Fprint(c.stdout, c.help)
	fmt.Fprintln(c.stdout, "\nFlags:")
	c.fs.SetOutput(c.stdout)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// usageError reports a usage error in one line and returns exitUsage.
func (c *cli) usageError(err error) int {
	msg := strings.ReplaceAll(err.Error(), "raftlock: ", "")
	fmt.Fprintf(c.stderr, "raftlock %s: %s (see raftlock %s --help)\n", c.name, msg, c.name)
	return exitUsage
}

// client returns the command's client, or reports a usage error.
func (c *cli) client() (*client.Client, int, bool) {
	cl, err := c.conn.client()
	if err != nil {
		return nil, c.usageError(err), false
	}
	return cl, exitOK, true
}

// withClient runs do with a client of the endpoints and a context bounded by
// --timeout, and returns do's exit code.
func (c *cli) withClient(do func(ctx context.Context, cl *client.Client) int) int {
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	defer cl.Close()
	ctx, cancel := c.conn.ctx()
	defer cancel()
	return do(ctx, cl)
}

// fail reports err in one line on stderr (and, with --json, as
// {"error", "message"} on stdout, with the details the API's answer had:
// the holders of a held lock or a full semaphore, a semaphore's limit) and
// returns its exit code.
func (c *cli) fail(err error) int {
	code, kind, msg := classify(err)
	fmt.Fprintf(c.stderr, "raftlock %s: %s\n", c.name, msg)
	if c.conn != nil && c.conn.json {
		out := map[string]any{"error": kind, "message": msg}
		var held *client.HeldError
		var full *client.FullError
		var mismatch *client.LimitMismatchError
		switch {
		case kind == client.CodeHeld && errors.As(err, &held):
			out["holder"] = map[string]any{"owner": held.Owner, "fencing_token": held.Token}
			if len(held.Holders) > 0 { // held shared: the holders, as the API's 409 lists them
				hs := []map[string]any{}
				for _, h := range held.Holders {
					hs = append(hs, map[string]any{"owner": h.Owner, "fencing_token": h.Token})
				}
				out["holders"] = hs
				out["holders_total"] = max(held.Total, len(held.Holders))
			}
		case kind == client.CodeFull && errors.As(err, &full):
			hs := []api.PermitHolder{}
			for _, h := range full.Holders {
				hs = append(hs, api.PermitHolder{Owner: h.Owner, Slot: h.Slot, FencingToken: h.Token})
			}
			out["holders"] = hs
			out["holders_total"] = max(full.Total, len(full.Holders))
		case kind == client.CodeLimitMismatch && errors.As(err, &mismatch):
			out["limit"] = mismatch.Limit
		}
		c.printJSON(out)
	}
	return code
}

func (c *cli) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// classify maps an error of the client to an exit code, a short kind for
// --json ("held", "not_holder", "unavailable", "unknown_outcome",
// "bad_request", "full", "limit_mismatch", "no_session", "session_full",
// "error") and a one-line message. The codes are those of docs/API.md,
// "Command line".
func classify(err error) (code int, kind, msg string) {
	detail := strings.ReplaceAll(err.Error(), "raftlock: ", "")
	var held *client.HeldError
	var full *client.FullError
	var mismatch *client.LimitMismatchError
	var apiErr *client.APIError
	var netErr net.Error
	var pathErr *fs.PathError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &held):
		msg = fmt.Sprintf("%s is held by %q (fencing token %d)", held.Name, held.Owner, held.Token)
		switch n := max(held.Total, len(held.Holders)) - 1; {
		case n == 1:
			msg += " and 1 other shared holder"
		case n > 1:
			msg += fmt.Sprintf(" and %d other shared holders", n)
		}
		return exitHeld, client.CodeHeld, msg
	case errors.Is(err, client.ErrHeld):
		return exitHeld, client.CodeHeld, detail
	case errors.As(err, &full):
		return exitHeld, client.CodeFull, fmt.Sprintf("semaphore %s is full: all %d permits are held", full.Name, max(full.Total, len(full.Holders)))
	case errors.Is(err, client.ErrFull):
		return exitHeld, client.CodeFull, detail
	case errors.As(err, &mismatch):
		return exitError, client.CodeLimitMismatch, fmt.Sprintf("semaphore %s is held with limit %d (the first holder sets it)", mismatch.Name, mismatch.Limit)
	case errors.Is(err, client.ErrLimitMismatch):
		return exitError, client.CodeLimitMismatch, detail
	case errors.Is(err, client.ErrNotHolder):
		return exitNotHolder, client.CodeNotHolder, "not holder: this lease does not hold the lock (it expired, was released, or never held it)"
	case errors.Is(err, client.ErrLeaseLost):
		return exitNotHolder, client.CodeNotHolder, detail
	case errors.Is(err, client.ErrUnknownOutcome):
		// Before the no_leader and deadline cases, which it may also match:
		// those promise that nothing was applied, and this one cannot.
		detail = strings.TrimPrefix(detail, "outcome unknown (the request may have been applied): ")
		if last, ok := strings.CutPrefix(detail, "context deadline exceeded (last error: "); ok {
			detail = "no certain answer within --timeout; last error: " + strings.TrimSuffix(last, ")")
		}
		return exitUnknown, client.CodeUnknownOutcome, "outcome unknown: the request may have been applied, or may still be; " +
			"check with 'raftlock get' or resend it with the same --lease-id (" + detail + ")"
	case errors.Is(err, client.ErrNoSession):
		return exitNotHolder, client.CodeNoSession, "no session: it expired or was closed (or never existed)"
	case errors.Is(err, client.ErrSessionFull):
		return exitError, client.CodeSessionFull, fmt.Sprintf("the session holds %d leases, the most it may", api.MaxLeasesPerSession)
	case errors.Is(err, client.ErrNoLeader) && errors.As(err, &apiErr):
		return exitUnavailable, "unavailable", "no leader: the cluster is electing one or has lost its quorum (" + apiErr.Message + ")"
	case errors.As(err, &certErr):
		return exitError, "error", "the server's certificate is not trusted (check --ca / RAFTLOCK_CA and the endpoint's host): " + certErr.Error()
	case errors.Is(err, client.ErrUnauthorized) && errors.As(err, &apiErr):
		return exitError, client.CodeUnauthorized, "unauthorized: " + apiErr.Message + " (give a token with RAFTLOCK_TOKEN or --token-file)"
	case errors.Is(err, client.ErrForbidden) && errors.As(err, &apiErr):
		return exitError, client.CodeForbidden, "forbidden: " + apiErr.Message
	case errors.Is(err, client.ErrOverloaded):
		return exitUnavailable, "unavailable", "cluster overloaded: " + detail
	case errors.As(err, &apiErr) && (apiErr.Code == client.CodeBadRequest || apiErr.Code == client.CodeTooLarge):
		return exitUsage, client.CodeBadRequest, apiErr.Message
	case errors.As(err, &pathErr):
		// This machine's file system: a syscall.Errno inside would match
		// net.Error below and read as the cluster being unavailable.
		return exitError, "error", detail
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr), errors.Is(err, os.ErrDeadlineExceeded):
		if last, ok := strings.CutPrefix(detail, "context deadline exceeded (last error: "); ok {
			detail = "no answer in time; last error: " + strings.TrimSuffix(last, ")")
		}
		return exitUnavailable, "unavailable", "cluster unavailable: " + detail
	case errors.As(err, &apiErr) && apiErr.Code == api.CodeNotSupportedYet:
		// As when --timeout ends first (above): refused before anything
		// was written, and the same exit whichever comes first.
		return exitUnavailable, "unavailable", "not supported yet, nothing applied: " + apiErr.Message
	}
	return exitError, "error", detail
}

// checkLeaseID applies the API's rule for lease ids here, so that a bad one
// is a usage error before anything is sent.
func checkLeaseID(id string) error {
	if id != "" && !api.ValidLeaseID(id) {
		return errors.New("--lease-id: must be " + api.LeaseIDRule)
	}
	return nil
}

// defaultOwner names this host, so that others see who holds a lock.
func defaultOwner() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// ms formats a duration as the API does in JSON: whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }
