package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
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

// durationFlag wraps a flag.Duration so that a value that does not parse
// is reported in flag terms ("--ttl 10: missing unit, e.g. 10s") instead of
// the flag package's "parse error".
type durationFlag struct {
	flag.Value
	name string
	bad  *error // the last refusal, with the flag's name, for cli.parse
}

func (d durationFlag) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		why := durationHint(s, err)
		*d.bad = fmt.Errorf("--%s %s: %s", d.name, s, why)
		return errors.New(why)
	}
	return d.Value.Set(s)
}

// Get keeps the flag recognisable as a duration (flag.Getter).
func (d durationFlag) Get() any { return d.Value.(flag.Getter).Get() }

// durationHint says what is wrong with a duration that did not parse.
func durationHint(s string, err error) string {
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return "missing unit, e.g. " + s + "s (units: ms, s, m, h)"
	}
	if strings.Contains(err.Error(), "unknown unit") {
		return "unknown unit; use ms, s, m or h, e.g. 1h30m"
	}
	return "not a duration; e.g. 500ms, 10s, 5m or 1h30m"
}

// wrapDurations makes every duration flag of fs report bad values through
// durationFlag, into bad.
func wrapDurations(fs *flag.FlagSet, bad *error) {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDur := g.Get().(time.Duration); isDur {
				if _, done := f.Value.(durationFlag); !done {
					f.Value = durationFlag{Value: f.Value, name: f.Name, bad: bad}
				}
			}
		}
	})
}

// shortDuration prints d without trailing zero units: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// The API's bounds, in flag terms.
var (
	minTTL      = time.Duration(api.MinTTLMs) * time.Millisecond
	maxTTL      = time.Duration(api.MaxTTLMs) * time.Millisecond
	maxLockWait = time.Duration(api.MaxLockDelayMs) * time.Millisecond
)

// checkTTL refuses a --ttl the API would (keep: 0 is allowed, and keeps
// the lease's own TTL).
func checkTTL(name string, d time.Duration, keep bool) error {
	if keep && d == 0 {
		return nil
	}
	if d < minTTL || d > maxTTL {
		extra := ""
		if keep {
			extra = " (or 0 to keep the current TTL)"
		}
		return fmt.Errorf("--%s must be between %s and %s%s, not %s", name, shortDuration(minTTL), shortDuration(maxTTL), extra, shortDuration(d))
	}
	return nil
}

// checkLockDelay refuses a --lock-delay the API would.
func checkLockDelay(d time.Duration) error {
	if d < 0 || d > maxLockWait {
		return fmt.Errorf("--lock-delay must be between 0 and %s, not %s", shortDuration(maxLockWait), shortDuration(d))
	}
	return nil
}
