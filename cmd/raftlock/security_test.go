package main

import (
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/raftnode/tlsconfig"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

const (
	cliAdmin = "cli-admin-token-0123456789abcdef"
	cliRW    = "cli-rw-token-0123456789abcdef"
	cliRO    = "cli-ro-token-0123456789abcdef"
)

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
