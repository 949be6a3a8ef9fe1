package main

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/httpapi"
)

func TestParseServe(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c serveConfig)
	}{
		{name: "full flags", args: []string{"--id", "n1", "--data-dir", "d", "--http-addr", "127.0.0.1:8001", "--raft-addr", "127.0.0.1:9001", "--peers", "n1=127.0.0.1:9001,n2=127.0.0.1:9002"},
			check: func(t *testing.T, c serveConfig) {
				if c.node.ID != "n1" || len(c.node.Peers) != 2 || c.node.AdvertiseHTTP != "127.0.0.1:8001" || c.tempDir {
					t.Errorf("%+v", c)
				}
			}},
		{name: "send-ahead is on unless turned off", args: []string{"--id", "n1", "--data-dir", "d"},
			check: func(t *testing.T, c serveConfig) {
				if c.node.NoSendAhead {
					t.Error("send-ahead off by default")
				}
			}},
		{name: "--send-ahead=false turns it off", args: []string{"--id", "n1", "--data-dir", "d", "--send-ahead=false"},
			check: func(t *testing.T, c serveConfig) {
				if !c.node.NoSendAhead {
					t.Error("send-ahead still on")
				}
			}},
		{name: "RAFTLOCK_SEND_AHEAD=false turns it off", args: []string{"--id", "n1", "--data-dir", "d"}, env: map[string]string{"RAFTLOCK_SEND_AHEAD": "false"},
			check: func(t *testing.T, c serveConfig) {
				if !c.node.NoSendAhead {
					t.Error("send-ahead still on")
				}
			}},
		{name: "environment fills what flags leave out", args: []string{"--id", "flag"}, env: map[string]string{"RAFTLOCK_ID": "env", "RAFTLOCK_DATA_DIR": "envdir"},
			check: func(t *testing.T, c serveConfig) {
				if c.node.ID != "flag" || c.node.DataDir != "envdir" {
					t.Errorf("flag must win, env must fill: %+v", c.node)
				}
			}},
		{name: "tenant caps and the probe port", args: []string{"--dev", "--data-dir", "d", "--tenant-max-waits", "7", "--probe-addr", "127.0.0.1:0"},
			env: map[string]string{"RAFTLOCK_TENANT_MAX_BLOCKING_READS": "9"},
			check: func(t *testing.T, c serveConfig) {
				if c.caps.Waits != 7 || c.caps.BlockingReads != 9 || c.caps.Sessions != httpapi.DefaultTenantSessions || c.probeAddr != "127.0.0.1:0" {
					t.Errorf("caps %+v, probe addr %q", c.caps, c.probeAddr)
				}
			}},
		{name: "dev with a data dir keeps it", args: []string{"--dev", "--data-dir", "mine"},
			check: func(t *testing.T, c serveConfig) {
				if c.tempDir || c.node.DataDir != "mine" || c.node.Peers["dev"] == "" {
					t.Errorf("%+v", c)
				}
			}},
		{name: "dev makes a temporary dir", args: []string{"--dev"},
			check: func(t *testing.T, c serveConfig) {
				defer os.RemoveAll(c.node.DataDir)
				if !c.tempDir || c.node.DataDir == "" {
					t.Errorf("%+v", c)
				}
			}},
		{name: "debug address", args: []string{"--id", "n1", "--data-dir", "d", "--debug-addr", "127.0.0.1:6060"},
			check: func(t *testing.T, c serveConfig) {
				if c.debugAddr != "127.0.0.1:6060" {
					t.Errorf("debug addr %q", c.debugAddr)
				}
			}},
		{name: "admission waiters", args: []string{"--id", "n1", "--data-dir", "d", "--admission-max-waiters", "300"},
			check: func(t *testing.T, c serveConfig) {
				if got := c.admission.options().MaxWaiters; got != 300 {
					t.Errorf("admission MaxWaiters %d, want 300", got)
				}
			}},
		{name: "memory limit", args: []string{"--id", "n1", "--data-dir", "d", "--memory-limit", "640MiB"},
			check: func(t *testing.T, c serveConfig) {
				if c.memoryLimit != 640<<20 {
					t.Errorf("memory limit %d, want %d", c.memoryLimit, 640<<20)
				}
			}},
		{name: "memory limit from env", args: []string{"--id", "n1", "--data-dir", "d"}, env: map[string]string{"RAFTLOCK_MEMORY_LIMIT": "2GiB"},
			check: func(t *testing.T, c serveConfig) {
				if c.memoryLimit != 2<<30 {
					t.Errorf("memory limit %d, want %d", c.memoryLimit, 2<<30)
				}
			}},
		{name: "bad memory limit", args: []string{"--id", "n1", "--data-dir", "d", "--memory-limit", "640MB"}, wantErr: "not a size"},
		{name: "zero memory limit", args: []string{"--id", "n1", "--data-dir", "d", "--memory-limit", "0"}, wantErr: "not a size"},
		{name: "gc min heap", args: []string{"--id", "n1", "--data-dir", "d"},
			check: func(t *testing.T, c serveConfig) {
				if c.gcMinHeap != 64<<20 {
					t.Errorf("default gc min heap %d, want %d", c.gcMinHeap, 64<<20)
				}
			}},
		{name: "gc min heap set", args: []string{"--id", "n1", "--data-dir", "d", "--gc-min-heap", "128MiB"},
			check: func(t *testing.T, c serveConfig) {
				if c.gcMinHeap != 128<<20 {
					t.Errorf("gc min heap %d, want %d", c.gcMinHeap, 128<<20)
				}
			}},
		{name: "gc min heap off", args: []string{"--id", "n1", "--data-dir", "d", "--gc-min-heap", "0"},
			check: func(t *testing.T, c serveConfig) {
				if c.gcMinHeap != 0 {
					t.Errorf("gc min heap %d, want 0 (off)", c.gcMinHeap)
				}
			}},
		{name: "bad gc min heap", args: []string{"--id", "n1", "--data-dir", "d", "--gc-min-heap", "64MB"}, wantErr: "not a size"},
		{name: "stop timeout", args: []string{"--id", "n1", "--data-dir", "d"},
			check: func(t *testing.T, c serveConfig) {
				if c.stopTimeout != 20*time.Second {
					t.Errorf("default stop timeout %v, want 20s", c.stopTimeout)
				}
			}},
		{name: "zero stop timeout", args: []string{"--id", "n1", "--data-dir", "d", "--stop-timeout", "0s"}, wantErr: "--stop-timeout"},
		{name: "missing id", args: []string{"--data-dir", "d"}, wantErr: "--id is required"},
		{name: "missing data dir", args: []string{"--id", "n1"}, wantErr: "--data-dir is required"},
		{name: "bad peers", args: []string{"--id", "n1", "--data-dir", "d", "--peers", "n1:9001"}, wantErr: "--peers"},
		{name: "duplicate peer", args: []string{"--id", "n1", "--data-dir", "d", "--peers", "n1=a:1,n1=b:2"}, wantErr: "twice"},
		{name: "peers and join", args: []string{"--id", "n1", "--data-dir", "d", "--peers", "n1=a:1", "--join", "http://x"}, wantErr: "exclude"},
		{name: "undialable advertise", args: []string{"--id", "n1", "--data-dir", "d", "--http-addr", "0.0.0.0:8001"}, wantErr: "--advertise-http"},
		{name: "bad env value", args: []string{"--id", "n1", "--data-dir", "d"}, env: map[string]string{"RAFTLOCK_ELECTION_TIMEOUT": "soon"}, wantErr: "RAFTLOCK_ELECTION_TIMEOUT"},
		{name: "bad log level", args: []string{"--id", "n1", "--data-dir", "d", "--log-level", "loud"}, wantErr: "--log-level"},
		{name: "stray argument", args: []string{"--id", "n1", "extra"}, wantErr: "unexpected argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseServe(tc.args, env(tc.env), io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// The stop timeout's watchdog ends the process (here: calls expire) when
// the deadline comes before the stop, and never after the stop.
func TestStopWatchdog(t *testing.T) {
	deadline := make(chan time.Time, 1)
	expired := make(chan struct{})
	stop := stopWatchdog(deadline, func() { close(expired) })
	deadline <- time.Time{}
	select {
	case <-expired:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not fire at its deadline")
	}
	stop()

	deadline = make(chan time.Time, 1)
	fired := false
	stop = stopWatchdog(deadline, func() { fired = true })
	stop() // returns once the watchdog is gone
	deadline <- time.Time{}
	if fired {
		t.Fatal("the watchdog fired after the stop")
	}
}
