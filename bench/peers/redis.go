package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// releaseScript deletes the lock only if it still holds this worker's
// value: a release after the lease ran out must not free another's lock.
const releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// redisLocker is the single-node Redis lock recipe: SET key value NX PX ttl,
// released by a Lua compare-and-delete. One connection per worker.
type redisLocker struct {
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	key     string
	value   string
	ttl     time.Duration
	sha     string
	cycle   int
	timeout time.Duration
}

func newRedisLocker(addr string, w int, ttl, timeout time.Duration) (*redisLocker, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	id := runID()
	l := &redisLocker{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn),
		key: fmt.Sprintf("bench:%s:%d", id, w), value: id, ttl: ttl, timeout: timeout}
	sha, err := l.do(context.Background(), "SCRIPT", "LOAD", releaseScript)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("redis script load: %w", err)
	}
	l.sha = sha.(string)
	return l, nil
}

func (l *redisLocker) acquire(ctx context.Context) error {
	l.cycle++
	v, err := l.do(ctx, "SET", l.key, l.token(), "NX", "PX", strconv.FormatInt(l.ttl.Milliseconds(), 10))
	if err != nil {
		return err
	}
	if v != "OK" {
		return fmt.Errorf("redis: lock %s held (%v)", l.key, v)
	}
	return nil
}

func (l *redisLocker) release(ctx context.Context) error {
	v, err := l.do(ctx, "EVALSHA", l.sha, "1", l.key, l.token())
	if err != nil {
		return err
	}
	if v != int64(1) {
		return fmt.Errorf("redis: release of %s deleted %v keys", l.key, v)
	}
	return nil
}

// token is this cycle's lock value, unique per grant.
func (l *redisLocker) token() string { return l.value + ":" + strconv.Itoa(l.cycle) }

func (l *redisLocker) close() { l.conn.Close() }

// do sends one command and reads its reply (RESP2): a string, int64, nil,
// or []any; an error reply becomes an error.
func (l *redisLocker) do(ctx context.Context, args ...string) (any, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(l.timeout)
	}
	_ = l.conn.SetDeadline(deadline)
	fmt.Fprintf(l.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(l.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := l.w.Flush(); err != nil {
		return nil, fmt.Errorf("redis write: %w", err)
	}
	return readReply(l.r)
}

var errRedisNil = errors.New("nil")

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("redis read: %w", err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redis: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, fmt.Errorf("redis: %s", body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("redis bulk length %q: %w", body, err)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("redis read: %w", err)
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("redis array length %q: %w", body, err)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}
