package fence

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgxQuerier is what the pgx guard needs: *pgx.Conn, *pgxpool.Pool, *pgxpool.Conn
// and pgx.Tx have it.
type PgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pgx is the same guard as SQL, over the same table and SQL text, through pgx.
type Pgx struct {
	db PgxQuerier
	q  queries
}

// NewPgx returns a guard over db using table (DefaultTable when empty; it may be
// schema-qualified, and is quoted).
func NewPgx(db PgxQuerier, table string) *Pgx {
	return &Pgx{db: db, q: newQueries(table)}
}

// CreateTable creates the token table if it does not exist.
func (g *Pgx) CreateTable(ctx context.Context) error {
	_, err := g.db.Exec(ctx, g.q.create)
	return err
}

// Advance implements Guard in one statement on the guard's database.
func (g *Pgx) Advance(ctx context.Context, resource string, token uint64) error {
	return advance(ctx, pgxStore{g.db}, g.q, resource, token)
}

// AdvanceTx is Advance inside tx. Until tx ends, other writers of resource wait; if
// tx rolls back (or its connection dies), the token is not recorded. After a
// *StaleTokenError the caller should roll tx back.
func (g *Pgx) AdvanceTx(ctx context.Context, tx pgx.Tx, resource string, token uint64) error {
	return advance(ctx, pgxStore{tx}, g.q, resource, token)
}

// Row does fenced conditional updates of a business table that keeps the last
// accepted token in each row, as in
//
//	CREATE TABLE ticket_reservations (
//	    id bigint PRIMARY KEY,
//	    holder text,
//	    last_fencing_token bigint NOT NULL DEFAULT 0
//	);
//
// The token column must be NOT NULL (a NULL never compares lower). Names are
// quoted, so give them as stored (lower case unless created quoted); Table may be
// schema-qualified.
type Row struct {
	Table       string
	IDColumn    string // "id" when empty
	TokenColumn string // "last_fencing_token" when empty
}

// Update runs the fenced conditional update of the row whose id column is id:
//
//	UPDATE Table SET <set>, last_fencing_token = $token
//	WHERE id = $id AND last_fencing_token < $token
//
// set is the SET list of the business columns, with placeholders $1 … $len(args)
// for args. When no row is updated, Update returns a *StaleTokenError naming the
// row's token, or an error matching pgx.ErrNoRows (and sql.ErrNoRows) if there is no
// such row. db may be a pgx.Tx, to update several rows or tables together.
func (r Row) Update(ctx context.Context, db PgxQuerier, id any, token uint64, set string, args ...any) error {
	return r.update(ctx, pgxStore{db}, id, token, set, args...)
}

type pgxStore struct{ q PgxQuerier }

func (s pgxStore) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := s.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (s pgxStore) queryInt(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.q.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}
