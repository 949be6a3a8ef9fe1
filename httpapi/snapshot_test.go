package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

type badInput struct{}

func (badInput) Error() string  { return "checksum mismatch" }
func (badInput) BadInput() bool { return true }

// snapStore adds Backups to the fake: save writes file, restore keeps
// what it got.
type snapStore struct {
	*fakeStore
	file     []byte
	saveErr  error
	restored []byte
	restErr  error
}

func (s *snapStore) SaveBackup(ctx context.Context, w io.Writer) error {
	if s.saveErr != nil {
		return s.saveErr
	}
	_, err := w.Write(s.file)
	return err
}

func (s *snapStore) RestoreBackup(ctx context.Context, r io.Reader, allowOtherCluster bool) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.restErr != nil {
		return s.restErr
	}
	s.restored = b
	return nil
}

func postSnapshot(h http.Handler, body []byte, ct string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/snapshot", bytes.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestSnapshotSave(t *testing.T) {
	st := &snapStore{fakeStore: newLeader("n1"), file: []byte("RAFTLOCK-BACKUP\nbytes")}
	srv := New(st, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler()})
	rec := do(t, srv, http.MethodGet, "/v1/snapshot", "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/octet-stream" || !bytes.Equal(rec.Body.Bytes(), st.file) {
		t.Fatalf("save: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	st.saveErr = nodeapi.ErrNotLeader
	rec = do(t, srv, http.MethodGet, "/v1/snapshot", "")
	wantError(t, rec, 503, api.CodeNoLeader, "leader only")
	wantRetryAfter(t, rec)
}

// The restore body is binary and may be far over api.MaxBody: bodyFirst and
// the JSON rule must not touch it; everything else keeps both.
func TestSnapshotRestoreTakesLargeBinaryBody(t *testing.T) {
	st := &snapStore{fakeStore: newLeader("n1")}
	srv := New(st, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler()})
	big := bytes.Repeat([]byte{0, 0xff, 7}, 3*api.MaxBody)
	rec := postSnapshot(srv, big, "application/octet-stream")
	if rec.Code != 200 || !bytes.Equal(st.restored, big) {
		t.Fatalf("restore: %d %s (got %d of %d bytes)", rec.Code, rec.Body, len(st.restored), len(big))
	}
	rec = postSnapshot(srv, big[:10], "application/json")
	wantError(t, rec, 415, api.CodeUnsupportedMediaType, "application/octet-stream")
	// Other routes keep their 64 KiB limit.
	rec = do(t, srv, http.MethodPost, "/v1/locks/acquire", strings.Repeat(" ", api.MaxBody+10))
	if rec.Code != 413 {
		t.Fatalf("acquire with a big body: %d, want 413", rec.Code)
	}
}

func TestSnapshotRestoreRefusesBadFile(t *testing.T) {
	st := &snapStore{fakeStore: newLeader("n1"), restErr: errors.Join(errors.New("restore"), badInput{})}
	srv := New(st, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler()})
	rec := postSnapshot(srv, []byte("junk"), "application/octet-stream")
	wantError(t, rec, 400, api.CodeBadRequest, "nothing changed")
	st.restErr = nodeapi.ErrNotLeader
	rec = postSnapshot(srv, []byte("junk"), "application/octet-stream")
	wantError(t, rec, 503, api.CodeNoLeader, "leader only")
}

func TestSnapshotWithoutBackupsIs501(t *testing.T) {
	srv := newServer(newLeader("n1"))
	rec := do(t, srv, http.MethodGet, "/v1/snapshot", "")
	wantError(t, rec, 501, api.CodeInternal, "cannot")
}

func TestSnapshotNeedsAdmin(t *testing.T) {
	st := &snapStore{fakeStore: newLeader("n1"), file: []byte("x")}
	srv := New(st, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Tokens: testTokens(t)})
	if rec := do(t, srv, http.MethodGet, "/v1/snapshot", "", "Authorization", "Bearer "+tokRW); rec.Code != 403 {
		t.Fatalf("save with read-write token: %d, want 403", rec.Code)
	}
	if rec := postSnapshot(srv, []byte("x"), "application/octet-stream", "Authorization", "Bearer "+tokRW); rec.Code != 403 || st.restored != nil {
		t.Fatalf("restore with read-write token: %d, want 403", rec.Code)
	}
	if rec := do(t, srv, http.MethodGet, "/v1/snapshot", "", "Authorization", "Bearer "+tokAdmin); rec.Code != 200 {
		t.Fatalf("save with admin token: %d %s", rec.Code, rec.Body)
	}
	if rec := postSnapshot(srv, []byte("x"), "application/octet-stream", "Authorization", "Bearer "+tokAdmin); rec.Code != 200 {
		t.Fatalf("restore with admin token: %d %s", rec.Code, rec.Body)
	}
}

// A follower refuses a restore before reading its (large) body.
func TestSnapshotRestoreOnFollowerReadsNoBody(t *testing.T) {
	f := newLeader("n2")
	f.leader = func() (string, string) { return "n1", "10.0.0.1:8001" }
	st := &snapStore{fakeStore: f}
	srv := New(st, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler()})
	rec := postSnapshot(srv, []byte("RAFTLOCK-BACKUP\n..."), "application/octet-stream")
	wantError(t, rec, 503, api.CodeNoLeader, "n1 at 10.0.0.1:8001")
	if st.restored != nil {
		t.Fatal("a follower restored")
	}
}
