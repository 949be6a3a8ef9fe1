package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/internal/clustertest"
	"github.com/raftlock/raftlock/raftnode/tlsconfig"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// TestMain lets a test start this test binary as `raftlock`: with
// RAFTLOCK_TEST_AS_MAIN=1 it runs the command line instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("RAFTLOCK_TEST_AS_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Environ()))
	}
	os.Exit(m.Run())
}

const (
	cliAdmin = "cli-admin-token-0123456789abcdef"
	cliRW    = "cli-rw-token-0123456789abcdef"
	cliRO    = "cli-ro-token-0123456789abcdef"
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
	ports := clustertest.FreePorts(t, 6)
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
		startServe(t, id, logFile, []string{"--id", id, "--data-dir", filepath.Join(nodeDir, "data"),
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

func TestParseServeSecurity(t *testing.T) {
	dir := t.TempDir()
	f := tlstest.NewCA(t, "serve flags CA").WriteFiles(dir, "n1")
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o600)
		return p
	}
	writeMode := func(name, content string, mode os.FileMode) string {
		p := write(name, content)
		os.Chmod(p, mode) // whatever the umask
		return p
	}
	client := writeClientCert(t, dir, "alice")
	tokens := write("tokens", cliRW+" read-write\n"+cliAdmin+" admin\n")
	noAdmin := write("no-admin", cliRW+" read-write\n")
	node := []string{"--id", "n1", "--data-dir", "d"}
	tlsFlags := []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}
	cases := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, c serveConfig)
	}{
		{name: "plain", args: nil, check: func(t *testing.T, c serveConfig) {
			if c.apiTLS != nil || c.node.RaftTLS != nil || c.tokens != nil || c.nodeToken != "" {
				t.Errorf("security on without flags: %+v", c)
			}
		}},
		{name: "tls and tokens", args: append(append([]string{"--auth-tokens", tokens}, tlsFlags...), "--tls-verify-clients"), check: func(t *testing.T, c serveConfig) {
			if c.apiTLS == nil || c.forwardTLS == nil || c.node.RaftTLS == nil || c.tokens == nil {
				t.Fatalf("missing a TLS config or the tokens: %+v", c)
			}
			if c.nodeToken != cliAdmin {
				t.Errorf("the node's own token is not the file's admin token")
			}
			if c.apiTLS.ClientAuth != tls.RequireAndVerifyClientCert || c.node.RaftTLS.ClientAuth != tls.RequireAndVerifyClientCert {
				t.Errorf("client certificates not required")
			}
		}},
		{name: "join token wins", args: []string{"--auth-tokens", noAdmin, "--join-token", "given-0123456789abcdef"}, check: func(t *testing.T, c serveConfig) {
			if c.nodeToken != "given-0123456789abcdef" {
				t.Errorf("the node's own token is not --join-token")
			}
		}},
		{name: "tls flags go together", args: []string{"--tls-cert", f.Cert, "--tls-ca", f.CA}, wantErr: "go together"},
		{name: "bad CA file", args: []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", tokens}, wantErr: "no PEM certificate"},
		{name: "verify clients needs tls", args: []string{"--tls-verify-clients"}, wantErr: "--tls-verify-clients needs"},
		{name: "plain join url with tls", args: append([]string{"--join", "http://127.0.0.1:8001"}, tlsFlags...), wantErr: "use https://"},
		{name: "no admin token", args: []string{"--auth-tokens", noAdmin}, wantErr: "no admin token"},
		{name: "join token alone", args: []string{"--join-token", "x"}, wantErr: "--join-token needs --auth-tokens"},
		{name: "bad token file", args: []string{"--auth-tokens", write("bad", cliRW+" superuser\n")}, wantErr: `line 1: role "superuser"`},
		// As ssh refuses a private key others can read.
		{name: "token file readable by others", args: []string{"--auth-tokens", writeMode("open", cliAdmin+" admin\n", 0o644)}, wantErr: "(mode 0644); it holds the cluster's tokens: run chmod 600 "},
		{name: "token file writable by group", args: []string{"--auth-tokens", writeMode("group", cliAdmin+" admin\n", 0o620)}, wantErr: "run chmod 600"},
		{name: "client certificate as node certificate", args: []string{"--tls-cert", client.Cert, "--tls-key", client.Key, "--tls-ca", client.CA}, wantErr: "not a raftlock node certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseServe(append(append([]string{}, node...), tc.args...), func(string) string { return "" }, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), cliRW) {
					t.Errorf("the error shows a token: %v", err)
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

// writeClientCert writes an API client certificate (no peer mark) for name
// and its CA into dir/client.
func writeClientCert(t *testing.T, dir, name string) tlsconfig.Files {
	t.Helper()
	ca := tlstest.NewCA(t, "client CA")
	certPEM, keyPEM := ca.IssueClient(name)
	d := filepath.Join(dir, "client")
	os.Mkdir(d, 0o700)
	f := tlsconfig.Files{CA: filepath.Join(d, "ca.pem"), Cert: filepath.Join(d, name+".pem"), Key: filepath.Join(d, name+"-key.pem")}
	for p, b := range map[string][]byte{f.CA: ca.PEM, f.Cert: certPEM, f.Key: keyPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}
