package fence

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultTable is the name of the token table when none is given.
const DefaultTable = "fencing_tokens"

// queries holds the SQL text shared by the database/sql and pgx guards.
type queries struct {
	create, advance, current string
}

func newQueries(table string) queries {
	if table == "" {
		table = DefaultTable
	}
	t := pgx.Identifier(strings.Split(table, ".")).Sanitize()
	return queries{
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (resource text PRIMARY KEY, last_token bigint NOT NULL)`,
		// One statement, so the check and the record are atomic: the conflicting row
		// is locked and the WHERE is evaluated on its latest committed version. Inside
		// a caller's transaction the lock is held until it ends, so a concurrent writer
		// of the same resource waits and then sees the outcome (or nothing, on rollback).
		advance: `INSERT INTO ` + t + ` AS f (resource, last_token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET last_token = EXCLUDED.last_token
WHERE f.last_token < EXCLUDED.last_token`,
		current: `SELECT last_token FROM ` + t + ` WHERE resource = $1`,
	}
}

// store is the little that the shared logic needs from database/sql or pgx.
type store interface {
	exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	// queryInt scans one int64; no row gives an error matching sql.ErrNoRows.
	queryInt(ctx context.Context, query string, args ...any) (int64, error)
}

func advance(ctx context.Context, s store, q queries, resource string, token uint64) error {
	if err := validToken(token); err != nil {
		return err
	}
	n, err := s.exec(ctx, q.advance, resource, int64(token))
	if err != nil {
		return fmt.Errorf("fence: advance %q to token %d: %w", resource, token, err)
	}
	if n == 1 {
		return nil
	}
	// Refused. The current token is read only for the error: the decision is made.
	cur, err := s.queryInt(ctx, q.current, resource)
	serr := &StaleTokenError{Resource: resource, Token: token, Current: uint64(cur)}
	if err != nil {
		return fmt.Errorf("%w (reading the current token: %v)", serr, err)
	}
	return serr
}

func (r Row) queries(set string, nargs int) (update, current string) {
	id, tok := r.IDColumn, r.TokenColumn
	if id == "" {
		id = "id"
	}
	if tok == "" {
		tok = "last_fencing_token"
	}
	t := pgx.Identifier(strings.Split(r.Table, ".")).Sanitize()
	id, tok = pgx.Identifier{id}.Sanitize(), pgx.Identifier{tok}.Sanitize()
	pt, pid := fmt.Sprintf("$%d", nargs+1), fmt.Sprintf("$%d", nargs+2)
	update = "UPDATE " + t + " SET " + set + ", " + tok + " = " + pt +
		" WHERE " + id + " = " + pid + " AND " + tok + " < " + pt
	current = "SELECT " + tok + " FROM " + t + " WHERE " + id + " = $1"
	return update, current
}

func (r Row) update(ctx context.Context, s store, id any, token uint64, set string, args ...any) error {
	if err := validToken(token); err != nil {
		return err
	}
	update, current := r.queries(set, len(args))
	n, err := s.exec(ctx, update, append(args[:len(args):len(args)], int64(token), id)...)
	resource := fmt.Sprintf("%s/%v", r.Table, id)
	if err != nil {
		return fmt.Errorf("fence: update %s with token %d: %w", resource, token, err)
	}
	if n > 0 {
		return nil
	}
	// No row updated: either the token is stale or there is no such row.
	cur, err := s.queryInt(ctx, current, id)
	if err != nil {
		return fmt.Errorf("fence: update %s with token %d: %w", resource, token, err)
	}
	return &StaleTokenError{Resource: resource, Token: token, Current: uint64(cur)}
}

var (
	_ Guard = (*Memory)(nil)
	_ Guard = (*SQL)(nil)
	_ Guard = (*Pgx)(nil)
)
