package fence

import (
	"context"
	"database/sql"
)

// SQLQuerier is what the database/sql guard needs: *sql.DB, *sql.Conn and *sql.Tx
// have it. The SQL is PostgreSQL's (INSERT … ON CONFLICT, $n placeholders).
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL is a Guard that keeps the highest token of each resource in a table
//
//	CREATE TABLE fencing_tokens (resource text PRIMARY KEY, last_token bigint NOT NULL)
//
// through database/sql. Use AdvanceTx to make the check part of the transaction
// that does the write it guards, so that both commit or neither does.
type SQL struct {
	db SQLQuerier
	q  queries
}

// NewSQL returns a guard over db using table (DefaultTable when empty; it may be
// schema-qualified, and is quoted).
func NewSQL(db SQLQuerier, table string) *SQL {
	return &SQL{db: db, q: newQueries(table)}
}

// CreateTable creates the token table if it does not exist.
func (g *SQL) CreateTable(ctx context.Context) error {
	_, err := g.db.ExecContext(ctx, g.q.create)
	return err
}

// Advance implements Guard in one statement on the guard's database.
func (g *SQL) Advance(ctx context.Context, resource string, token uint64) error {
	return advance(ctx, sqlStore{g.db}, g.q, resource, token)
}

// AdvanceTx is Advance inside tx. Until tx ends, other writers of resource wait; if
// tx rolls back (or its connection dies), the token is not recorded. After a
// *StaleTokenError the caller should roll tx back.
func (g *SQL) AdvanceTx(ctx context.Context, tx *sql.Tx, resource string, token uint64) error {
	return advance(ctx, sqlStore{tx}, g.q, resource, token)
}

type sqlStore struct{ q SQLQuerier }

func (s sqlStore) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlStore) queryInt(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.q.QueryRowContext(ctx, query, args...).Scan(&n)
	return n, err
}
