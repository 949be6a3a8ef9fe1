package procs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// ServerPackage is the package Binary builds.
const ServerPackage = "github.com/raftlock/raftlock/cmd/raftlock"

// BinEnv names a prebuilt raftlock binary that Binary returns instead of
// building one (CI builds it once for every package; a developer may point
// it at a binary under study). It stands for the default build only: a
// build with tags is always compiled.
const BinEnv = "RAFTLOCK_BIN"

type built struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*built{}
)

// Binary returns the path of a raftlock server binary built with the given
// build tags (none for the release build; "raftlock_faults" or
// "raftlock_seeded_bugs" for the fault and seeded builds). With Build it is
// the one way tests and the checker get a server to run as a process.
func Binary(tags ...string) (string, error) { return Build{Tags: tags}.Binary() }

// Build says how to build the server.
type Build struct {
	Tags []string
	// CoverMode, when set ("set", "count", "atomic"), builds with -cover in
	// that mode, instrumenting the server's main package: a process of such
	// a build writes its counters to $GOCOVERDIR on exit, which `go test
	// -cover` sets and merges, so the code the process ran counts in the
	// test's coverage.
	CoverMode string
}

// Binary builds b at most once per process and returns the path. The output
// goes to a directory under os.TempDir named after the user and the module
// directory, one file per build, written to a temporary name and renamed
// into place, so concurrent test processes (go test ./... runs packages in
// parallel) never see a partial file and repeated runs reuse one file
// instead of leaving a binary per run; go's build cache makes a rebuild of
// unchanged code a link only. The build runs in the module, so it works
// from any package directory of it. RAFTLOCK_BIN, when set, stands in for
// every build without tags.
func (b Build) Binary() (string, error) {
	tags := slices.Clone(b.Tags)
	slices.Sort(tags)
	if len(tags) == 0 {
		if bin := os.Getenv(BinEnv); bin != "" {
			return bin, nil
		}
	}
	b.Tags = tags
	key := strings.Join(tags, ",") + "/" + b.CoverMode
	buildsMu.Lock()
	bb := builds[key]
	if bb == nil {
		bb = &built{}
		builds[key] = bb
	}
	buildsMu.Unlock()
	bb.once.Do(func() { bb.path, bb.err = b.build() })
	return bb.path, bb.err
}

func (b Build) build() (string, error) {
	tags := b.Tags
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("build %s: not inside the raftlock module (go env GOMOD is %q)", ServerPackage, mod)
	}
	modDir := filepath.Dir(mod)
	sum := sha256.Sum256([]byte(modDir))
	name := "raftlock"
	if len(tags) > 0 {
		name += "-" + strings.Join(tags, "-")
	}
	if b.CoverMode != "" {
		name += "-cover" + b.CoverMode
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("raftlock-testbin-%d-%s", os.Getuid(), hex.EncodeToString(sum[:6])))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // a no-op once renamed
	args := []string{"build", "-o", tmp.Name()}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	if b.CoverMode != "" {
		args = append(args, "-cover", "-covermode", b.CoverMode, "-coverpkg", ServerPackage)
	}
	cmd := exec.Command("go", append(args, ServerPackage)...)
	cmd.Dir = modDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	bin := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return bin, nil
}
