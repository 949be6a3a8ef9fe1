package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// A `raftlock serve --join` process, in a cluster with HTTPS, Raft mutual
// TLS and tokens, joins as a non-voter and is promoted to voter: serve
// wires the fetcher through which the leader reads its progress, over https
// with the admin token. Without that wiring it would stay a non-voter.
func TestServeJoinIsPromoted(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "raftlock join test CA")
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte(cliAdmin+" admin\n"+cliRO+" read-only\n"), 0o600)
	ports := testenv.FreePorts(t, 4)
	var eps []string
	for i, id := range []string{"n1", "n2"} {
		nodeDir := filepath.Join(dir, id)
		os.Mkdir(nodeDir, 0o700)
		f := ca.WriteFiles(nodeDir, id)
		args := []string{"--id", id, "--data-dir", filepath.Join(nodeDir, "data"),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[2*i]), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
			"--election-timeout", "500ms", "--heartbeat-timeout", "500ms", "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA,
			"--auth-tokens", tokens}
		if i == 0 {
			args = append(args, "--peers", fmt.Sprintf("n1=127.0.0.1:%d", ports[1]))
		} else {
			args = append(args, "--join", eps[0])
		}
		testenv.StartServe(t, id, filepath.Join(dir, id+".log"), args)
		eps = append(eps, fmt.Sprintf("https://127.0.0.1:%d", ports[2*i]))
	}
	base := env{"RAFTLOCK_ENDPOINTS=" + strings.Join(eps, ","), "RAFTLOCK_CA=" + filepath.Join(dir, "n1", "ca.pem"), "RAFTLOCK_TOKEN=" + cliRO}
	eventually(t, base, "n2 to be a voter", func(r result) bool {
		var cs client.ClusterStatus
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &cs) != nil || len(cs.Nodes) != 2 {
			return false
		}
		return cs.Nodes[1].ID == "n2" && cs.Nodes[1].Voter
	}, "cluster", "status", "--json", "--endpoints", eps[0])
}
