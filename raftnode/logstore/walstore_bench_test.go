package logstore

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
)

// BenchmarkWALAppendBySegmentSize appends one fsynced entry per op with
// segments of each size, so the cost of rotating segments (a meta commit,
// creating and preallocating a file) shows per append. 16 KiB entries make
// a 4 MiB segment rotate every 256 appends: many times in a run.
func BenchmarkWALAppendBySegmentSize(b *testing.B) {
	for _, mib := range []int{64, 4} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			w, err := openWALSized(filepath.Join(b.TempDir(), walDir), hclog.NewNullLogger(),
				privateVFS{walfs.New()}, mib<<20)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			payload := make([]byte, 16<<10)
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l := &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: payload}
				if err := w.StoreLogs([]*raft.Log{l}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
