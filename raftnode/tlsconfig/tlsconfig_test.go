package tlsconfig

import (
	"crypto/tls"
	"net"
	"os/exec"
	"path/filepath"
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
	cerr := tls.Client(a, client).Handshake()
	if cerr != nil {
		a.Close()
		<-errc
		return cerr
	}
	return <-errc
}
