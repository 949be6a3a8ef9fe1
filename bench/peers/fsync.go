package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// fsyncProbe times count appends of 4 KiB, each followed by fdatasync, to a
// scratch file in dir: what one Raft append costs on that disk at the least.
func fsyncProbe(dir string, count int, jsonOut bool) error {
	f, err := os.CreateTemp(dir, ".fsync-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	d := make([]time.Duration, 0, count)
	for range count {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return fmt.Errorf("fdatasync: %w", err)
		}
		d = append(d, time.Since(t))
	}
	p50, p99 := pcts(d)
	abs, _ := filepath.Abs(dir)
	if jsonOut {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"dir": abs, "count": count, "p50_ms": p50, "p99_ms": p99})
	}
	fmt.Printf("fdatasync after a 4 KiB append in %s: p50 %.2f ms, p99 %.2f ms (%d samples)\n", abs, p50, p99, count)
	return nil
}
