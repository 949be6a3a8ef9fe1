package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode"
)

const snapshotHelp = `Usage: raftlock snapshot <save|inspect|restore> [flags] FILE

  save FILE      write a consistent backup of the cluster's state, from the leader
  inspect FILE   check a backup file offline: index, term, locks, size, checksum
  restore FILE   replace the whole cluster's state with a backup (every node takes it)

save and restore need an admin token. The file holds every lease id: it is
written 0600; keep it private.

Examples:
  raftlock snapshot save /backups/raftlock-2026-12-01.snap
  raftlock snapshot inspect /backups/raftlock-2026-12-01.snap
  raftlock snapshot restore /backups/raftlock-2026-12-01.snap
`

const snapshotSaveHelp = `Usage: raftlock snapshot save [flags] FILE

Asks the leader for a consistent snapshot (taken after every committed entry
is applied) and writes it to FILE, mode 0600, through a temporary file so
FILE is never half-written. Prints its index, term, lock count and SHA-256.

Example:
  raftlock snapshot save /backups/raftlock.snap
`

const snapshotInspectHelp = `Usage: raftlock snapshot inspect [--json] FILE

Reads a backup file without a cluster and checks it whole: format, length,
SHA-256 trailer and that the lock state decodes. Exit 0 if it would be
accepted by 'raftlock snapshot restore', 1 if not.

Example:
  raftlock snapshot inspect /backups/raftlock.snap
`

const snapshotRestoreHelp = `Usage: raftlock snapshot restore [flags] FILE

Replaces the whole cluster's state with the backup in FILE, through Raft: the
leader installs it and every follower receives it. Locks held in the backup
come back with their holders, tokens and remaining lease time; locks taken
since are gone. Every fencing token granted after the restore is larger than
every token granted before it, so fenced resources refuse the old holders'
late writes as usual. A damaged or foreign file is refused and changes
nothing, and so is a file whose records the API would refuse (names, owners,
ids, TTLs, deadlines, tokens above the file's index). A backup carries its
cluster's id: another cluster's backup, or one taken by a build before
cluster ids, is refused unless --allow-other-cluster is given (to rebuild a
cluster from another's backup). The cluster keeps its own id and members.
Needs an admin token.

Example:
  raftlock snapshot restore /backups/raftlock.snap
  raftlock snapshot restore --allow-other-cluster /backups/old-cluster.snap
`

func snapshotCmd(args []string, stdout, stderr io.Writer, environ env) int {
	subs := map[string]command{
		"save":    snapshotSaveCmd,
		"inspect": snapshotInspectCmd,
		"restore": snapshotRestoreCmd,
	}
	return subcommands("snapshot", snapshotHelp, subs, args, stdout, stderr, environ)
}

func snapshotSaveCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("snapshot save", snapshotSaveHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 5*time.Minute, true)
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	defer cl.Close()
	// The file first: a path that cannot be written is this machine's
	// error, found before the leader is asked for a backup.
	out, err := createPrivate(pos[0])
	if err != nil {
		return c.fail(err)
	}
	defer out.abort()
	ctx, cancel := c.conn.ctx()
	defer cancel()
	data, err := cl.SaveSnapshot(ctx)
	if err != nil {
		return c.fail(err)
	}
	info, machine, err := raftnode.DecodeBackup(bytes.NewReader(data))
	if err != nil {
		return c.fail(fmt.Errorf("the leader sent a file that does not check: %w", err))
	}
	if err := out.commit(data); err != nil {
		return c.fail(err)
	}
	return c.printInfo(pos[0], info, machine)
}

func snapshotInspectCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("snapshot inspect", snapshotInspectHelp, stdout, stderr)
	var asJSON bool
	c.fs.BoolVar(&asJSON, "json", false, "print JSON")
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return c.fail(err)
	}
	defer f.Close()
	info, machine, err := raftnode.DecodeBackup(f)
	if err != nil {
		fmt.Fprintf(stderr, "raftlock snapshot inspect: %s: checksum or format NOT OK: %v\n", pos[0], err)
		if asJSON {
			c.printJSON(map[string]any{"file": pos[0], "ok": false, "message": err.Error()})
		}
		return exitError
	}
	if asJSON {
		c.conn = &conn{json: true}
	}
	return c.printInfo(pos[0], info, machine)
}

func snapshotRestoreCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("snapshot restore", snapshotRestoreHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 5*time.Minute, true)
	var opts client.RestoreOptions
	c.fs.BoolVar(&opts.AllowOtherCluster, "allow-other-cluster", false, "restore a backup of another cluster, or one without a cluster id")
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return c.fail(err)
	}
	// Checked here first: a damaged file is reported without a cluster.
	info, _, err := raftnode.ParseBackup(data)
	if err != nil {
		fmt.Fprintf(stderr, "raftlock snapshot restore: %s refused, nothing changed: %v\n", pos[0], err)
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		if err := cl.RestoreSnapshotWith(ctx, data, opts); err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(map[string]any{"restored": true, "index": info.Index, "term": info.Term, "locks": info.Locks})
			return exitOK
		}
		fmt.Fprintf(stdout, "restored %s: %d locks from index %d (term %d); new tokens continue above the cluster's last index\n",
			pos[0], info.Locks, info.Index, info.Term)
		return exitOK
	})
}

// printInfo prints a checked backup: its header, and what its state holds
// by kind (machine is its state, decoded and checked).
func (c *cli) printInfo(file string, info raftnode.BackupInfo, machine *fsm.Machine) int {
	sum := hex.EncodeToString(info.SHA256[:])
	n := machine.Counts()
	if c.conn != nil && c.conn.json {
		// "locks" keeps its meaning for scripts that read it: every lease
		// held, lock holds and permits together.
		c.printJSON(map[string]any{"file": file, "ok": true, "index": info.Index, "term": info.Term, "locks": info.Locks,
			"lock_holds": n.LockHolds, "held_locks": n.Locks, "permits": n.Permits, "semaphores": n.Semaphores, "sessions": n.Sessions,
			"size": info.Size, "fsm_size": info.FSMSize, "sha256": sum, "cluster_id": info.ClusterID})
		return exitOK
	}
	cluster := info.ClusterID
	if cluster == "" {
		cluster = "none (taken before cluster ids)"
	}
	fmt.Fprintf(c.stdout, "%s: index %d, term %d, %s, %d bytes, cluster %s, sha256 %s, checksum OK\n",
		file, info.Index, info.Term, countsText(n), info.Size, cluster, sum)
	return exitOK
}

// countsText says what a state holds, locks and semaphore permits apart:
// "2 locks held (3 holds), 5 permits of 1 semaphore, 1 session".
func countsText(n fsm.Counts) string {
	plural := func(k int, one, many string) string {
		if k == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", k, many)
	}
	s := plural(n.Locks, "lock", "locks") + " held"
	if n.LockHolds != n.Locks {
		s += " (" + plural(n.LockHolds, "hold", "holds") + ", shared holders each counted)"
	}
	s += ", " + plural(n.Permits, "permit", "permits") + " of " + plural(n.Semaphores, "semaphore", "semaphores")
	return s + ", " + plural(n.Sessions, "session", "sessions")
}

// privateFile is a file written mode 0600 through a temporary file in the
// same directory, renamed over the path only once complete and synced.
type privateFile struct {
	path string
	tmp  *os.File
}

// createPrivate checks that path can be written (its directory exists and
// takes files, and it is no directory itself) by creating the temporary
// file now.
func createPrivate(path string) (*privateFile, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "write", Path: path, Err: errors.New("is a directory")}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".raftlock-snapshot-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // about the temporary file's name, which means nothing to the user
		}
		return nil, &fs.PathError{Op: "write", Path: path, Err: err}
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return &privateFile{path: path, tmp: tmp}, nil
}

// commit writes data and renames the file into place.
func (p *privateFile) commit(data []byte) error {
	_, err := p.tmp.Write(data)
	if err == nil {
		err = p.tmp.Sync()
	}
	if cerr := p.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p.tmp.Name(), p.path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p.path, err)
	}
	return nil
}

// abort removes the temporary file; a no-op after commit.
func (p *privateFile) abort() {
	p.tmp.Close()
	os.Remove(p.tmp.Name())
}
