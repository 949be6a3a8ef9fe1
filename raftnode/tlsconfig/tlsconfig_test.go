package tlsconfig

import (
	"crypto/tls"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The certificates scripts/certs.sh makes load, and two nodes' Peer configs
// complete a mutual handshake under each name a node is dialled by.
func TestCertsScript(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	dir := t.TempDir()
	if out, err := exec.Command("bash", "../../scripts/certs.sh", dir, "n1", "n2").CombinedOutput(); err != nil {
		t.Fatalf("certs.sh: %v\n%s", err, out)
	}
	load := func(name string) *Bundle {
		b, err := Load(Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	n1, n2 := load("n1"), load("n2")
	for _, host := range []string{"n2", "127.0.0.1", "localhost"} {
		cfg := n1.Peer()
		cfg.ServerName = host
		if err := handshake(cfg, n2.Peer()); err != nil {
			t.Errorf("n1 -> n2 as %s: %v", host, err)
		}
	}
	cfg := n1.Peer()
	cfg.ServerName = "n3"
	if handshake(cfg, n2.Peer()) == nil {
		t.Error("n2's certificate passed for n3")
	}
	// An API client certificate (--client) from the same CA is no peer,
	// and not a node certificate to start with.
	if out, err := exec.Command("bash", "../../scripts/certs.sh", "--client", "alice", dir).CombinedOutput(); err != nil {
		t.Fatalf("certs.sh --client: %v\n%s", err, out)
	}
	alice := load("alice")
	cfg = alice.Peer()
	cfg.ServerName = "127.0.0.1"
	if err := handshake(cfg, n2.Peer()); err == nil || !strings.Contains(err.Error(), "not a raftlock node certificate") {
		t.Errorf("an API client certificate on the Raft port: %v", err)
	}
	if err := alice.CheckNode(); err == nil {
		t.Error("an API client certificate passed for a node's")
	}
	if err := n1.CheckNode(); err != nil {
		t.Errorf("node certificate: %v", err)
	}
	cfg = alice.Client()
	cfg.ServerName = "n2"
	if err := handshake(cfg, n2.Server(true)); err != nil {
		t.Errorf("the API refused an API client certificate: %v", err)
	}
	if _, err := Load(Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "n1.pem")}); err == nil {
		t.Error("a certificate without its key loaded")
	}
}

func handshake(client, server *tls.Config) error {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() { errc <- tls.Server(b, server).Handshake() }()
	c := tls.Client(a, client)
	cerr := c.Handshake()
	if cerr != nil {
		a.Close()
		<-errc
		return cerr
	}
	// In TLS 1.3 the client is done before the server has judged its
	// certificate; read, so that the server's alert (net.Pipe does not
	// buffer) does not block it.
	go c.Read(make([]byte, 1))
	return <-errc
}
