package main

import (
	"flag"
	"fmt"
	"strings"
)

// envPrefix: every flag --some-flag also reads RAFTLOCK_SOME_FLAG.
const envPrefix = "RAFTLOCK_"

// applyEnv fills each flag not given on the command line from the
// environment. The command line wins; this is the one place the environment
// is read for flags.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		key := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(key); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", key, v, e)
			}
		}
	})
	return err
}

// parsePeers reads "n1=host:port,n2=host:port".
func parsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	if s == "" {
		return peers, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not id=host:port", part)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("--peers: node %q listed twice", id)
		}
		peers[id] = addr
	}
	return peers, nil
}
