package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// startSecureCluster runs three `raftlock serve` processes with HTTPS, Raft
// mutual TLS and tokens, all set by flags and RAFTLOCK_* variables as an
// operator would. It returns the endpoints, the CA file and the log files.
func startSecureCluster(t *testing.T) (endpoints []string, caFile string, logs []string) {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "raftlock CLI test CA")
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte("# role per token\n"+cliAdmin+" admin\n"+cliRW+" read-write\n"+cliRO+" read-only\n"), 0o600)
	ports := testenv.FreePorts(t, 6)
	var peers []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[3+i]))
	}
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("n%d", i+1)
		nodeDir := filepath.Join(dir, id)
		os.Mkdir(nodeDir, 0o700)
		f := ca.WriteFiles(nodeDir, id)
		caFile = f.CA
		logFile := filepath.Join(dir, id+".log")
		testenv.StartServe(t, id, logFile, []string{"--id", id, "--data-dir", filepath.Join(nodeDir, "data"),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--peers", strings.Join(peers, ","), "--election-timeout", "500ms", "--heartbeat-timeout", "500ms",
			"--tls-cert", f.Cert, "--tls-key", f.Key, "--log-level", "trace"},
			"RAFTLOCK_TLS_CA="+f.CA, "RAFTLOCK_AUTH_TOKENS="+tokens)
		endpoints = append(endpoints, fmt.Sprintf("https://127.0.0.1:%d", ports[i]))
		logs = append(logs, logFile)
	}
	return endpoints, caFile, logs
}

// The CLI against a three-node cluster of real processes with HTTPS, Raft
// mutual TLS and tokens: each role gets what it may do and no more, and no
// token reaches a node's log.
func TestCLISecureCluster(t *testing.T) {
	eps, caFile, logs := startSecureCluster(t)
	all := strings.Join(eps, ",")
	adminFile := filepath.Join(t.TempDir(), "admin.token")
	os.WriteFile(adminFile, []byte(cliAdmin+"\n"), 0o600)
	base := env{"RAFTLOCK_ENDPOINTS=" + all, "RAFTLOCK_CA=" + caFile}
	withToken := func(tok string) func() env { return func() env { return env{"RAFTLOCK_TOKEN=" + tok} } }
	eventually(t, base, "every node to be ready", func(r result) bool { return r.code == exitOK }, "health")
	eventually(t, base, "every node to be ready", func(r result) bool { return r.code == exitOK }, "health", "--endpoints", all)

	var lease leaseOut
	var leader string
	steps := []step{
		{name: "status with a read-only token", env: withToken(cliRO), args: args("cluster", "status", "--json"), check: func(t *testing.T, r result) {
			var n int
			if n, leader = members(t, r); n != 3 || leader == "" {
				t.Fatalf("status %s", r.stdout)
			}
		}},
		{name: "acquire with a read-write token", env: withToken(cliRW), args: args("acquire", "--json", "--ttl", "60s", "secure/orders"), check: func(t *testing.T, r result) {
			decode(t, r.stdout, &lease)
			if lease.FencingToken == 0 || lease.LeaseID == "" {
				t.Fatalf("lease %+v", lease)
			}
		}},
		{name: "held for others", env: withToken(cliRW), args: args("acquire", "secure/orders"), code: exitHeld, stderr: "is held by"},
		{name: "get with --token-file", args: args("get", "--token-file", adminFile, "secure/orders"), stdout: `held by`},
		{name: "no token", args: args("get", "secure/orders"), code: exitError, stderr: `^raftlock get: unauthorized: a bearer token is required`},
		{name: "unknown token", env: withToken("not-a-token-0123456789abcdef"), args: args("list"), code: exitError, stderr: `unauthorized: unknown bearer token`},
		{name: "read-only may not release", env: withToken(cliRO), args: func() []string { return []string{"release", "--lease-id", lease.LeaseID, "secure/orders"} },
			code: exitError, stderr: `^raftlock release: forbidden: a read-only token cannot POST /v1/locks/release`},
		{name: "read-write may not transfer", env: withToken(cliRW), args: args("cluster", "transfer"), code: exitError, stderr: `forbidden: .*needs admin`},
		{name: "admin transfers", args: args("cluster", "transfer", "--token-file", adminFile), stdout: `^leadership transferred`},
		{name: "same token after the transfer", env: withToken(cliRO), args: args("get", "--json", "secure/orders"), check: func(t *testing.T, r result) {
			var got lockJSON
			decode(t, r.stdout, &got)
			if !got.Held || got.FencingToken != lease.FencingToken {
				t.Fatalf("after transfer %+v, want token %d", got, lease.FencingToken)
			}
		}},
		{name: "host:port endpoints mean https with --ca", env: withToken(cliRO), args: args("list", "--endpoints", strings.TrimPrefix(eps[1], "https://")), stdout: `secure/orders`},
		{name: "health needs no token", args: args("health", "--live", "--addr", eps[2]), stdout: `^https://127\.0\.0\.1:\d+/healthz: ok\n$`},
		{name: "release", env: withToken(cliRW), args: func() []string { return []string{"release", "--lease-id", lease.LeaseID, "secure/orders"} }},
		{name: "without the CA the server is not trusted", env: func() env { return env{"RAFTLOCK_CA=", "RAFTLOCK_TOKEN=" + cliRO} },
			args: args("list"), code: exitError, stderr: `^raftlock list: the server.s certificate is not trusted .*unknown authority`},
		{name: "plain http to a TLS node fails", env: withToken(cliRO),
			args: args("list", "--timeout", "1s", "--endpoints", strings.Replace(eps[0], "https", "http", 1)), code: exitError, stderr: `HTTPS server`},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, base) }) {
			break
		}
	}
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		if !strings.Contains(string(b), "serving") || !strings.Contains(string(b), "raft_mtls=true") {
			t.Errorf("%s: no serving line with raft_mtls=true:\n%s", f, b)
		}
		for _, tok := range []string{cliAdmin, cliRW, cliRO} {
			if strings.Contains(string(b), tok) {
				t.Errorf("%s holds a token", f)
			}
		}
	}
}
