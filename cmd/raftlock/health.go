package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// health is `raftlock health --addr URL`: exit 0 when the node at URL answers
// /readyz with 200 (a leader is known and the node has caught up), 1 otherwise.
// It exists for container healthchecks, where the FROM scratch image has no
// curl; it is left out of the usage text until the full CLI documents it.
func health(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "http://127.0.0.1:8001", "node HTTP URL")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	live := fs.Bool("live", false, "check /healthz (the process serves) instead of /readyz")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if err := applyEnv(fs, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "raftlock health: %v\n", err)
		return exitUsage
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	url := strings.TrimRight(*addr, "/")
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	resp, err := (&http.Client{Timeout: *timeout}).Get(url + path)
	if err != nil {
		fmt.Fprintf(stderr, "raftlock health: %v\n", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "raftlock health: %s%s: %s %s\n", url, path, resp.Status, strings.TrimSpace(string(body)))
		return exitError
	}
	fmt.Fprintf(stdout, "%s%s: ok (node %s, leader %s)\n", url, path, resp.Header.Get("X-Raftlock-Node"), resp.Header.Get("X-Raftlock-Leader"))
	return exitOK
}
