package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode/tlsconfig"
)

// runCerts runs scripts/certs.sh with args, skipping the test without openssl.
func runCerts(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	if out, err := exec.Command("bash", append([]string{"../../scripts/certs.sh"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("certs.sh %v: %v\n%s", args, err, out)
	}
}

// dialStream is a raft.StreamLayer that only dials, with a fixed TLS config:
// the attacker's side of a Raft connection.
type dialStream struct {
	net.Listener
	cfg *tls.Config
}

func (d dialStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), d.cfg)
}

// The CA that signs node certificates also signs API
// client certificates (--tls-verify-clients). Such a certificate once
// passed on the Raft port, and one forged AppendEntries made a follower
// apply a lock held by "mallory". Now a certificate from
// `scripts/certs.sh --client` is good for the API and refused by every Raft
// port, and node certificates from `scripts/certs.sh DIR n1 n2 n3`, given
// with the flags deployments use, still form a cluster.
func TestRaftPortRefusesAPIClientCertificate(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	runCerts(t, certs, "n1", "n2", "n3")
	runCerts(t, "--client", "mallory", certs)
	ports := testenv.FreePorts(t, 6)
	var peers []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[3+i]))
	}
	var eps []string
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("n%d", i+1)
		testenv.StartServe(t, id, filepath.Join(dir, id+".log"), []string{"--id", id, "--data-dir", filepath.Join(dir, id),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--peers", strings.Join(peers, ","), "--election-timeout", "500ms", "--heartbeat-timeout", "500ms",
			"--tls-cert", filepath.Join(certs, id+".pem"), "--tls-key", filepath.Join(certs, id+"-key.pem"),
			"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-verify-clients"})
		eps = append(eps, fmt.Sprintf("https://127.0.0.1:%d", ports[i]))
	}
	// mallory's certificate is good for the API...
	base := env{"RAFTLOCK_ENDPOINTS=" + strings.Join(eps, ","), "RAFTLOCK_CA=" + filepath.Join(certs, "ca.pem"),
		"RAFTLOCK_CERT=" + filepath.Join(certs, "mallory.pem"), "RAFTLOCK_KEY=" + filepath.Join(certs, "mallory-key.pem")}
	eventually(t, base, "a leader every node agrees on", func(r result) bool { return r.code == exitOK }, "health")

	// ...and for nothing on the Raft port: a forged AppendEntries that
	// grants mallory a lock reaches no node.
	b, err := tlsconfig.Load(tlsconfig.Files{CA: filepath.Join(certs, "ca.pem"),
		Cert: filepath.Join(certs, "mallory.pem"), Key: filepath.Join(certs, "mallory-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.Client()
	cfg.ServerName = "127.0.0.1"
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: dialStream{ln, cfg}, MaxPool: 1, Timeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
	defer trans.Close()
	forged := fsm.Command{Op: fsm.OpAcquire, Name: "victim", Owner: "mallory", LeaseID: "mallory-lease-0123456789abcdef", TTL: 3600_000}
	for i := 0; i < 3; i++ {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[3+i])
		req := &raft.AppendEntriesRequest{
			RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(ln.Addr().String()), ID: []byte("mallory")},
			Term:              1 << 20,
			Leader:            []byte(ln.Addr().String()),
			LeaderCommitIndex: 1 << 20,
			Entries:           []*raft.Log{{Index: 1 << 20, Term: 1 << 20, Type: raft.LogCommand, Data: forged.Encode(nil)}},
		}
		var resp raft.AppendEntriesResponse
		err := trans.AppendEntries(raft.ServerID(fmt.Sprintf("n%d", i+1)), raft.ServerAddress(addr), req, &resp)
		if err == nil {
			t.Fatalf("the Raft port %s answered an API client certificate's AppendEntries: %+v", addr, resp)
		}
		t.Logf("n%d refused: %v", i+1, err)
	}
	// No state changed: the lock is free for an honest client, and the
	// nodes still agree on one leader.
	if r := runCLI(t, base, "acquire", "--owner", "honest", "--ttl", "60s", "victim"); r.code != exitOK {
		t.Fatalf("honest acquire after the forged AppendEntries: exit %d, %s", r.code, r.stderr)
	}
	eventually(t, base, "every node healthy", func(r result) bool { return r.code == exitOK }, "health")
	for i := 0; i < 3; i++ {
		log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)))
		if strings.Contains(string(log), "mallory-lease") {
			t.Errorf("n%d logged mallory's forged entry", i+1)
		}
	}
}

// A node whose own certificate has no raftlock-peer mark (made by an older
// scripts/certs.sh) refuses to start, and says what to do.
func TestServeRefusesUnmarkedNodeCertificate(t *testing.T) {
	dir := t.TempDir()
	runCerts(t, "--client", "old", dir)
	r := runCLI(t, nil, "serve", "--id", "n1", "--data-dir", filepath.Join(dir, "d"),
		"--tls-cert", filepath.Join(dir, "old.pem"), "--tls-key", filepath.Join(dir, "old-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem"))
	if r.code == exitOK || !strings.Contains(r.stderr, "not a raftlock node certificate") || !strings.Contains(r.stderr, "re-run scripts/certs.sh") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}
