package fence

// Tests against a real PostgreSQL server named by RAFTLOCK_TEST_PG_DSN
// (scripts/pg.sh starts one). Each test works in a schema of its own, so tests run
// in parallel and can be repeated on the same server.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// testSchema creates a fresh schema, dropped at the end of the test, and returns a
// DSN whose connections use it as their search_path.
func testSchema(t *testing.T) (dsn, schema string) {
	t.Helper()
	dsn = os.Getenv("RAFTLOCK_TEST_PG_DSN")
	if dsn == "" {
		msg := `RAFTLOCK_TEST_PG_DSN is not set; to run the PostgreSQL tests: export "$(scripts/pg.sh start)"`
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: these tests must run, not skip)")
		}
		t.Skip(msg)
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema = "fence_test_" + hex.EncodeToString(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to RAFTLOCK_TEST_PG_DSN: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("RAFTLOCK_TEST_PG_DSN must be a URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// backend runs the same scenarios through database/sql and through pgx.
type backend struct {
	guard interface {
		Guard
		CreateTable(context.Context) error
	}
	exec     func(ctx context.Context, q string, args ...any) error
	queryInt func(ctx context.Context, q string, args ...any) (int64, error)
	begin    func(ctx context.Context) (*testTx, error)
}

// testTx is a transaction of either driver.
type testTx struct {
	advance  func(ctx context.Context, resource string, token uint64) error
	exec     func(ctx context.Context, q string, args ...any) error
	queryInt func(ctx context.Context, q string, args ...any) (int64, error)
	commit   func(ctx context.Context) error
	rollback func(ctx context.Context) error
}

var backends = []struct {
	name string
	open func(t *testing.T, dsn, table string) *backend
}{
	{"database/sql", openSQL},
	{"pgx", openPgx},
}

func openSQL(t *testing.T, dsn, table string) *backend {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g := NewSQL(db, table)
	s := sqlStore{db}
	return &backend{
		guard:    g,
		exec:     func(ctx context.Context, q string, args ...any) error { _, err := s.exec(ctx, q, args...); return err },
		queryInt: s.queryInt,
		begin: func(ctx context.Context) (*testTx, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			s := sqlStore{tx}
			return &testTx{
				advance:  func(ctx context.Context, r string, tok uint64) error { return g.AdvanceTx(ctx, tx, r, tok) },
				exec:     func(ctx context.Context, q string, args ...any) error { _, err := s.exec(ctx, q, args...); return err },
				queryInt: s.queryInt,
				commit:   func(context.Context) error { return tx.Commit() },
				rollback: func(context.Context) error { return tx.Rollback() },
			}, nil
		},
	}
}

func openPgx(t *testing.T, dsn, table string) *backend {
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	g := NewPgx(pool, table)
	s := pgxStore{pool}
	return &backend{
		guard:    g,
		exec:     func(ctx context.Context, q string, args ...any) error { _, err := s.exec(ctx, q, args...); return err },
		queryInt: s.queryInt,
		begin: func(ctx context.Context) (*testTx, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, err
			}
			s := pgxStore{tx}
			return &testTx{
				advance:  func(ctx context.Context, r string, tok uint64) error { return g.AdvanceTx(ctx, tx, r, tok) },
				exec:     func(ctx context.Context, q string, args ...any) error { _, err := s.exec(ctx, q, args...); return err },
				queryInt: s.queryInt,
				commit:   tx.Commit,
				rollback: tx.Rollback,
			}, nil
		},
	}
}

// forEachBackend runs f, in parallel, once per driver, each in a fresh schema with
// the token table, a business table accounts(id, value) holding row 1 = 0, and a
// log of committed writes, writes(seq, token).
func forEachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Parallel()
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			dsn, _ := testSchema(t)
			b := bk.open(t, dsn, "")
			ctx := context.Background()
			if err := b.guard.CreateTable(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, value bigint NOT NULL);
				INSERT INTO accounts VALUES (1, 0);
				CREATE TABLE writes (seq bigserial PRIMARY KEY, token bigint NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			f(t, b)
		})
	}
}

func current(t *testing.T, b *backend, resource string) int64 {
	t.Helper()
	n, err := b.queryInt(context.Background(), "SELECT last_token FROM fencing_tokens WHERE resource = $1", resource)
	if err != nil {
		t.Fatalf("current token of %q: %v", resource, err)
	}
	return n
}

func TestPGAdvance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		steps := []struct {
			resource string
			token    uint64
			current  uint64 // 0: accepted; else the Current of the expected *StaleTokenError
		}{
			{"a", 5, 0}, {"a", 5, 5}, {"a", 4, 5}, {"a", 6, 0}, {"b", 1, 0}, {"a", 1, 6},
			{"a", MaxToken, 0}, {"a", MaxToken, MaxToken},
		}
		for i, s := range steps {
			err := b.guard.Advance(ctx, s.resource, s.token)
			if s.current == 0 {
				if err != nil {
					t.Fatalf("step %d: Advance(%q, %d) = %v", i, s.resource, s.token, err)
				}
				if got := current(t, b, s.resource); uint64(got) != s.token {
					t.Fatalf("step %d: recorded %d, want %d", i, got, s.token)
				}
				continue
			}
			checkStale(t, err, s.resource, s.token, s.current)
		}
		for _, tok := range []uint64{0, MaxToken + 1} {
			if err := b.guard.Advance(ctx, "c", tok); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("Advance(%d) = %v, want ErrInvalidToken", tok, err)
			}
		}
	})
}

// A schema-qualified table name that needs quoting works.
func TestPGTableName(t *testing.T) {
	t.Parallel()
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			dsn, schema := testSchema(t)
			b := bk.open(t, dsn, schema+`.My "fence" Tokens`)
			ctx := context.Background()
			if err := b.guard.CreateTable(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.guard.CreateTable(ctx); err != nil {
				t.Fatalf("CreateTable twice: %v", err)
			}
			if err := b.guard.Advance(ctx, "r", 2); err != nil {
				t.Fatal(err)
			}
			checkStale(t, b.guard.Advance(ctx, "r", 1), "r", 1, 2)
			n, err := b.queryInt(ctx, `SELECT last_token FROM `+schema+`."My ""fence"" Tokens"`)
			if err != nil || n != 2 {
				t.Fatalf("got %d, %v", n, err)
			}
		})
	}
}

// Concurrent writers, each with its own increasing tokens interleaved with the
// others', check the token and write the business row in one transaction. Only
// increasing tokens commit, and the row ends with the highest token's write.
func TestPGConcurrentWriters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		const writers, perWriter = 8, 40
		var (
			wg              sync.WaitGroup
			mu              sync.Mutex
			accepted, stale int
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					token := uint64(i*writers + w + 1)
					ok, err := fencedWrite(ctx, b, token)
					if err != nil {
						t.Errorf("writer %d, token %d: %v", w, token, err)
						return
					}
					mu.Lock()
					if ok {
						accepted++
					} else {
						stale++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		const highest = writers * perWriter
		if got := current(t, b, "account/1"); got != highest {
			t.Errorf("recorded token %d, want the highest, %d", got, highest)
		}
		if v, err := b.queryInt(ctx, "SELECT value FROM accounts WHERE id = 1"); err != nil || v != highest {
			t.Errorf("account holds %d (%v), want the highest token's write, %d", v, err, highest)
		}
		// The token row lock serializes the writers, so seq gives the commit order.
		tokens := queryInts(t, b, "SELECT token FROM writes ORDER BY seq")
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("committed tokens not increasing at %d: %v", i, tokens)
			}
		}
		if len(tokens) != accepted {
			t.Errorf("%d writes committed, %d accepted", len(tokens), accepted)
		}
		t.Logf("%d writers × %d tokens: %d accepted, %d refused as stale", writers, perWriter, accepted, stale)
	})
}

// fencedWrite is a service's write: token check and business write, one transaction.
func fencedWrite(ctx context.Context, b *backend, token uint64) (accepted bool, err error) {
	tx, err := b.begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.rollback(ctx)
	err = tx.advance(ctx, "account/1", token)
	var serr *StaleTokenError
	if errors.As(err, &serr) {
		if serr.Current < token {
			return false, fmt.Errorf("refused with a lower current token: %v", err)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := tx.exec(ctx, "UPDATE accounts SET value = $1 WHERE id = 1", int64(token)); err != nil {
		return false, err
	}
	if err := tx.exec(ctx, "INSERT INTO writes (token) VALUES ($1)", int64(token)); err != nil {
		return false, err
	}
	return true, tx.commit(ctx)
}

func queryInts(t *testing.T, b *backend, q string) []int64 {
	t.Helper()
	n, err := b.queryInt(context.Background(), "SELECT count(*) FROM ("+q+") AS q")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, n)
	for i := range out {
		if out[i], err = b.queryInt(context.Background(), q+fmt.Sprintf(" OFFSET %d LIMIT 1", i)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A transaction that advances the token and then rolls back leaves the guard as it
// was: a lower token than the rolled-back one is still accepted afterwards.
func TestPGRollbackLeavesGuard(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		if ok, err := fencedWrite(ctx, b, 5); !ok || err != nil {
			t.Fatalf("write with token 5: %v, %v", ok, err)
		}
		tx, err := b.begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.advance(ctx, "account/1", 10); err != nil {
			t.Fatal(err)
		}
		if err := tx.exec(ctx, "UPDATE accounts SET value = 10 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if err := tx.rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if got := current(t, b, "account/1"); got != 5 {
			t.Fatalf("after rollback the recorded token is %d, want 5", got)
		}
		if ok, err := fencedWrite(ctx, b, 7); !ok || err != nil {
			t.Fatalf("write with token 7 after the rollback of 10: %v, %v", ok, err)
		}
		if v, _ := b.queryInt(ctx, "SELECT value FROM accounts WHERE id = 1"); v != 7 {
			t.Fatalf("account holds %d, want 7", v)
		}
	})
}

// A writer whose connection dies mid-transaction (a crashed service) holds the
// token row while it lives; when it dies, the writer waiting behind it goes on and
// sees the token as it was before the crashed transaction.
func TestPGCrashedTxLeavesGuard(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if ok, err := fencedWrite(ctx, b, 5); !ok || err != nil {
			t.Fatalf("write with token 5: %v, %v", ok, err)
		}

		crashed, err := b.begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer crashed.rollback(ctx)
		if err := crashed.advance(ctx, "account/1", 10); err != nil {
			t.Fatal(err)
		}
		if err := crashed.exec(ctx, "UPDATE accounts SET value = 10 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		crashedPID, err := crashed.queryInt(ctx, "SELECT pg_backend_pid()")
		if err != nil {
			t.Fatal(err)
		}

		waiter, err := b.begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer waiter.rollback(ctx)
		waiterPID, err := waiter.queryInt(ctx, "SELECT pg_backend_pid()")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- waiter.advance(ctx, "account/1", 8) }()

		// The waiter must be blocked on the crashed writer's row lock.
		for {
			var ev int64
			ev, err = b.queryInt(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", waiterPID)
			if err != nil {
				t.Fatal(err)
			}
			if ev == 1 {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("token 8 was decided (%v) while token 10's transaction was open", err)
			case <-ctx.Done():
				t.Fatal("the waiter never blocked")
			case <-time.After(10 * time.Millisecond):
			}
		}

		if err := b.exec(ctx, "SELECT pg_terminate_backend($1)", crashedPID); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("token 8 after the crash of token 10's transaction: %v", err)
		}
		if err := waiter.exec(ctx, "UPDATE accounts SET value = 8 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if err := waiter.commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := crashed.commit(ctx); err == nil {
			t.Fatal("the terminated transaction committed")
		}
		if got := current(t, b, "account/1"); got != 8 {
			t.Fatalf("recorded token %d, want 8", got)
		}
		if v, _ := b.queryInt(ctx, "SELECT value FROM accounts WHERE id = 1"); v != 8 {
			t.Fatalf("account holds %d, want 8", v)
		}
	})
}

// The seed design: the business row keeps its own last token, and a fenced
// UPDATE … WHERE last_fencing_token < $token either wins or reports stale.
func TestPGRowUpdate(t *testing.T) {
	t.Parallel()
	dsn, _ := testSchema(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE ticket_reservations (
		id bigint PRIMARY KEY, holder text, last_fencing_token bigint NOT NULL DEFAULT 0);
		INSERT INTO ticket_reservations (id) VALUES (402)`); err != nil {
		t.Fatal(err)
	}
	row := Row{Table: "ticket_reservations"}
	holder := func() (h string, tok int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT holder, last_fencing_token FROM ticket_reservations WHERE id = 402").Scan(&h, &tok); err != nil {
			t.Fatal(err)
		}
		return h, tok
	}

	t.Run("the GC pause story", func(t *testing.T) {
		// A got token 10 and paused; B got 11 and reserved; A resumes and writes.
		if err := row.Update(ctx, pool, 402, 11, "holder = $1", "worker-b"); err != nil {
			t.Fatal(err)
		}
		err := row.Update(ctx, pool, 402, 10, "holder = $1", "worker-a")
		var serr *StaleTokenError
		if !errors.As(err, &serr) || serr.Token != 10 || serr.Current != 11 || serr.Resource != "ticket_reservations/402" {
			t.Fatalf("A's write: %v, want stale token 10 against 11", err)
		}
		if h, tok := holder(); h != "worker-b" || tok != 11 {
			t.Fatalf("row = %s, %d; want worker-b, 11", h, tok)
		}
	})

	t.Run("concurrent interleaved writers", func(t *testing.T) {
		const writers, perWriter, base = 6, 30, 100
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					token := uint64(base + i*writers + w)
					err := row.Update(ctx, pool, int64(402), token, "holder = $1", fmt.Sprint("token-", token))
					var serr *StaleTokenError
					if err != nil && (!errors.As(err, &serr) || serr.Current < token) {
						t.Errorf("token %d: %v", token, err)
					}
				}
			}()
		}
		wg.Wait()
		last := base + writers*perWriter - 1
		if h, tok := holder(); h != fmt.Sprint("token-", last) || tok != int64(last) {
			t.Fatalf("row = %s, %d; want the highest token's write, %d", h, tok, last)
		}
	})

	t.Run("no such row", func(t *testing.T) {
		err := row.Update(ctx, pool, 999, 5000, "holder = $1", "x")
		if !errors.Is(err, pgx.ErrNoRows) || !errors.Is(err, sql.ErrNoRows) || errors.Is(err, ErrStaleToken) {
			t.Fatalf("got %v, want ErrNoRows", err)
		}
	})

	t.Run("inside a transaction that rolls back", func(t *testing.T) {
		_, before := holder()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := row.Update(ctx, tx, 402, uint64(before)+10, "holder = $1", "rolled-back"); err != nil {
			t.Fatal(err)
		}
		tx.Rollback(ctx)
		if err := row.Update(ctx, pool, 402, uint64(before)+1, "holder = $1", "next"); err != nil {
			t.Fatalf("after rollback: %v", err)
		}
	})
}
