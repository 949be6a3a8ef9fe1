package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
)

const healthHelp = `Usage: raftlock health [flags]

Asks each node given whether it is ready (GET /readyz: a leader is known and
the node has applied the log up to the leader's commit index), or with --live
only whether the process serves (GET /healthz). Each node is asked once, with
no retries. Exits 0 when every node answers 200, 1 otherwise (2 on bad
flags): usable as a container healthcheck, since the image has no curl.

Examples:
  raftlock health                                    # the node on 127.0.0.1:8001
  raftlock health --live --addr http://127.0.0.1:8001
  raftlock health --endpoints http://10.0.0.1:8001,http://10.0.0.2:8001
`

// healthCmd keeps the flags of the first, minimal health command that the
// Dockerfile and docker-compose.yml call (--addr, --timeout, --live; /readyz
// by default), so those healthchecks keep their meaning.
func healthCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("health", healthHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 2*time.Second, true)
	addr := c.fs.String("addr", "", "node URL to check; same as --endpoints with one node")
	live := c.fs.Bool("live", false, "check /healthz (the process serves) instead of /readyz")
	ready := c.fs.Bool("ready", false, "check /readyz (the default)")
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	if *live && *ready {
		return c.usageError(errors.New("--live and --ready exclude each other"))
	}
	switch {
	case c.given["addr"] && c.given["endpoints"]:
		return c.usageError(errors.New("--addr and --endpoints exclude each other"))
	case c.given["addr"]:
		c.conn.endpoints = *addr
	case !c.given["endpoints"] && *addr != "" && c.conn.endpoints == defaultEndpoint:
		c.conn.endpoints = *addr // RAFTLOCK_ADDR
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	defer cl.Close()
	path, check := "/readyz", cl.Ready
	if *live {
		path, check = "/healthz", cl.Health
	}
	type result struct {
		Endpoint string `json:"endpoint"`
		OK       bool   `json:"ok"`
		Error    string `json:"error,omitempty"`
	}
	var results []result
	code = exitOK
	for _, ep := range c.conn.endpointList() {
		ctx, cancel := c.conn.ctx()
		err := check(ctx, ep)
		cancel()
		r := result{Endpoint: strings.TrimRight(ep, "/") + path, OK: err == nil}
		if err != nil {
			code = exitError
			r.Error = healthError(err)
			fmt.Fprintf(stderr, "raftlock health: %s: %s\n", r.Endpoint, r.Error)
		} else if !c.conn.json {
			fmt.Fprintf(stdout, "%s: ok\n", r.Endpoint)
		}
		results = append(results, r)
	}
	if c.conn.json {
		c.printJSON(map[string]any{"ok": code == exitOK, "nodes": results})
	}
	return code
}

// healthError says why a probe failed, in a few words.
func healthError(err error) string {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable && apiErr.Code == "" {
		return "not ready (HTTP 503: no leader known, or not caught up with the log)"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return strings.ReplaceAll(err.Error(), "raftlock: ", "")
}
