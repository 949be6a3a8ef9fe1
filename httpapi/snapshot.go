package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// Backups is what a Store offers to save and restore backup files
// (raftnode.Node does); a store without it answers 501.
type Backups interface {
	// SaveBackup writes a backup file of the cluster's state to w. Only
	// the leader can (nodeapi.ErrNotLeader elsewhere).
	SaveBackup(ctx context.Context, w io.Writer) error
	// RestoreBackup replaces the cluster's state with the backup file
	// read from r, as it streams in; allowOtherCluster accepts a backup of
	// another cluster (or of none). An error with a BadInput() true method
	// means the file was refused and nothing changed; a read error of r
	// is returned wrapped.
	RestoreBackup(ctx context.Context, r io.Reader, allowOtherCluster bool) error
}

// The route is /v1/snapshot and its answers say "snapshot", as the HTTP
// contract and the CLI (raftlock snapshot save|restore) do; what it carries
// is a backup file (raftnode's word), not one of Raft's own snapshots.
const (
	snapshotPath = "/v1/snapshot"
	// MaxSnapshotBody bounds the body of POST /v1/snapshot, the only route
	// whose body may exceed api.MaxBody.
	MaxSnapshotBody = 1 << 30
	// snapshotTimeout bounds a save or restore, body upload included: a
	// large file through Raft takes longer than a lock operation.
	snapshotTimeout = 10 * time.Minute
	octetStream     = "application/octet-stream"
)

func (s *Server) backups(w http.ResponseWriter, r *http.Request) (Backups, bool) {
	sn, ok := s.store.(Backups)
	if !ok {
		refuseBody(w, r)
		writeError(w, &apiError{http.StatusNotImplemented, api.CodeInternal, "this node cannot take or restore snapshots"})
	}
	return sn, ok
}

// saveSnapshot serves GET /v1/snapshot: the leader's backup file. It is
// built whole before the answer starts, so a failure still gets a status.
func (s *Server) saveSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, ok := s.backups(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
	defer cancel()
	var buf bytes.Buffer
	if err := sn.SaveBackup(ctx, &buf); err != nil {
		s.log.Warn("backup save failed", "error", err)
		writeError(w, notLeaderHint(s, err))
		return
	}
	w.Header().Set("Content-Type", octetStream)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Header().Set("Content-Disposition", `attachment; filename="raftlock.snap"`)
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// restoreSnapshot serves POST /v1/snapshot: a binary body, not JSON.
func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != octetStream {
		refuseBody(w, r)
		writeError(w, &apiError{http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType,
			"the body of POST /v1/snapshot must be a backup file sent as " + octetStream})
		return
	}
	sn, ok := s.backups(w, r)
	if !ok {
		return
	}
	if id, _ := s.store.Leader(); id != s.store.ID() {
		// Refused before up to 1 GiB is read for nothing.
		refuseBody(w, r)
		writeError(w, notLeaderHint(s, nodeapi.ErrNotLeader))
		return
	}
	allow := false
	if v := r.URL.Query().Get("allow_other_cluster"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			refuseBody(w, r)
			writeError(w, badRequest("allow_other_cluster: must be true or false"))
			return
		}
		allow = b
	}
	// Past authorize: an admin's upload may be slow, within reason. The
	// body streams into the restore, which checks the header before it
	// reads on and never holds the file (raftnode.DecodeBackup).
	setReadDeadline(r, time.Now().Add(snapshotTimeout))
	body := &countedBody{r: http.MaxBytesReader(w, r.Body, MaxSnapshotBody)}
	ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
	defer cancel()
	err := sn.RestoreBackup(ctx, body, allow)
	setReadDeadline(r, time.Time{})
	if err != nil {
		var tooLarge *http.MaxBytesError
		var bad interface{ BadInput() bool }
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, &apiError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("snapshot over %d bytes", MaxSnapshotBody)})
		case errors.As(err, &bad) && bad.BadInput():
			// The rest of the body is not read: the connection goes.
			refuseBody(w, r)
			writeError(w, badRequest("snapshot refused, nothing changed: %v", err))
		case body.err != nil && !errors.Is(body.err, io.EOF):
			writeError(w, badRequest("reading snapshot: %v", body.err))
		default:
			s.log.Warn("backup restore failed", "error", err)
			writeError(w, notLeaderHint(s, err))
		}
		return
	}
	s.log.Warn("cluster state restored from an uploaded backup", "bytes", body.n, "remote", r.RemoteAddr, "allow_other_cluster", allow)
	writeJSON(w, http.StatusOK, map[string]any{"restored": true, "bytes": body.n})
}

// countedBody counts the bytes read from a request body and keeps its
// first read error.
type countedBody struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countedBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// notLeaderHint adds the leader's address to a not-leader error: snapshots
// are not forwarded (their bodies are large), the client goes there itself.
func notLeaderHint(s *Server, err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) && row.code == api.CodeNoLeader {
			msg := err.Error() + "; snapshots are served by the leader only"
			if id, addr := s.store.Leader(); id != "" {
				msg += fmt.Sprintf(" (%s at %s)", id, addr)
			}
			return &apiError{row.status, row.code, msg}
		}
	}
	return err
}
