package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcdLocker is etcd's own lock recipe: a session (a lease kept alive) and a
// concurrency.Mutex on it. Uncontended, Lock is one Txn (create the key
// under the lease; own the lock when it is the oldest) and Unlock one Delete,
// both through Raft and each member's WAL fsync.
type etcdLocker struct {
	s *concurrency.Session
	m *concurrency.Mutex
}

// newEtcd connects once; every worker gets its own session and lock key, as
// raftlock bench gives each worker its own lock.
func newEtcd(endpoints []string, ttl, timeout time.Duration) (func(w int) (locker, error), func(), error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: timeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcd client: %w", err)
	}
	prefix := "/bench/" + runID() + "/"
	mk := func(w int) (locker, error) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl.Seconds())))
		if err != nil {
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		return &etcdLocker{s: s, m: concurrency.NewMutex(s, fmt.Sprintf("%s%d", prefix, w))}, nil
	}
	return mk, func() { cli.Close() }, nil
}

func (l *etcdLocker) acquire(ctx context.Context) error { return l.m.Lock(ctx) }
func (l *etcdLocker) release(ctx context.Context) error { return l.m.Unlock(ctx) }
func (l *etcdLocker) close()                            { l.s.Close() }
