package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A truncated raft.db is a refusal (exit 1, what is wrong), not `fatal
// error: SIGBUS`. The WAL keeps its own bolt file, DATA/wal/wal-meta.db
// (which segment files make up the log): truncated the same way, it must be
// refused the same way.
//
// Expected: exit 1, naming the damaged file (checkWALMeta). Before that
// fix: `fatal error: fault` (SIGBUS), exit 2.
func TestServeRefusesTruncatedWALMeta(t *testing.T) {
	s := newSingleNode(t)
	s.seed(t)
	db := filepath.Join(s.data, "wal", "wal-meta.db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{fi.Size() / 2, 100} {
		t.Run(fmt.Sprintf("%d of %d bytes", size, fi.Size()), func(t *testing.T) {
			if err := os.Truncate(db, size); err != nil {
				t.Fatal(err)
			}
			s.refused(t, "wal-meta.db")
		})
	}
}
