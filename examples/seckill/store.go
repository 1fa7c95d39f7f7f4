package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver, pure Go
)

// schema is the orders table, the same on SQLite and PostgreSQL. The two
// UNIQUE constraints make the database the last line of defence: an order
// is written once however often its job runs, and a user holds one order
// per sale whatever got past the gate.
const schema = `CREATE TABLE IF NOT EXISTS seckill_orders (
	order_id   TEXT PRIMARY KEY,
	sale_id    TEXT NOT NULL,
	user_id    TEXT NOT NULL,
	ip         TEXT NOT NULL,
	status     TEXT NOT NULL,
	placed_at  BIGINT NOT NULL,
	written_at BIGINT NOT NULL,
	UNIQUE (sale_id, user_id)
)`

// orderStore writes orders through database/sql. The queries use $n
// placeholders in order of appearance, which both PostgreSQL and SQLite read.
type orderStore struct {
	db   *sql.DB
	kind string // "PostgreSQL" or "SQLite"
	// where names the database for messages (no password).
	where string
}

// openStore connects to PostgreSQL when databaseURL is set, else to the
// SQLite file sqlitePath (created if missing), and creates the table.
func openStore(ctx context.Context, databaseURL, sqlitePath string) (*orderStore, error) {
	var s orderStore
	var err error
	if databaseURL != "" {
		s.kind, s.where = "PostgreSQL", redactURL(databaseURL)
		s.db, err = sql.Open("pgx", databaseURL)
	} else {
		if sqlitePath == "" {
			return nil, errors.New("orders: no database: set DATABASE_URL or a SQLite path")
		}
		s.kind, s.where = "SQLite", sqlitePath
		// WAL lets readers in other processes (the load generator counting
		// orders) work while a consumer writes; busy_timeout makes writers
		// of several processes wait for each other instead of failing.
		s.db, err = sql.Open("sqlite", "file:"+sqlitePath+
			"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
		if err == nil {
			s.db.SetMaxOpenConns(4)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("orders: open %s %s: %w", s.kind, s.where, err)
	}
	if err := s.db.PingContext(ctx); err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("orders: %s %s does not answer: %w", s.kind, s.where, err)
	}
	if _, err := s.db.ExecContext(ctx, schema); err != nil {
		// Two processes creating the table at once on PostgreSQL: one of
		// them fails on the catalog's unique index; the table is there now.
		if _, err = s.db.ExecContext(ctx, schema); err != nil {
			_ = s.db.Close()
			return nil, fmt.Errorf("orders: create table: %w", err)
		}
	}
	return &s, nil
}

func (s *orderStore) close() error { return s.db.Close() }

// insert writes o as an unpaid order unless its ID or its (sale, user) is
// there already. It reports whether it wrote the row and, when it did not,
// the order the user holds: o's own ID for a job that ran before, another
// for a second order of the user.
func (s *orderStore) insert(ctx context.Context, o orderArgs) (bool, string, error) {
	res, err := s.db.ExecContext(ctx,
		`INSERT INTO seckill_orders (order_id, sale_id, user_id, ip, status, placed_at, written_at)
		 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
		o.Order, o.Sale, o.User, o.IP, stateUnpaid, o.PlacedAt, time.Now().UnixMilli())
	if err != nil {
		return false, "", fmt.Errorf("orders: insert %s: %w", o.Order, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, "", fmt.Errorf("orders: insert %s: %w", o.Order, err)
	} else if n == 1 {
		return true, "", nil
	}
	var held string
	err = s.db.QueryRowContext(ctx,
		`SELECT order_id FROM seckill_orders WHERE sale_id = $1 AND user_id = $2`, o.Sale, o.User).Scan(&held)
	if errors.Is(err, sql.ErrNoRows) {
		// The conflict was on the order ID alone: another user's order
		// with the same ID, which newOrderID's 50 random bits make
		// vanishingly unlikely.
		return false, "", fmt.Errorf("orders: insert %s: the ID is taken by another user's order", o.Order)
	}
	if err != nil {
		return false, "", fmt.Errorf("orders: insert %s: %w", o.Order, err)
	}
	return false, held, nil
}

// setStatus moves an unpaid order's row to status (a final state).
func (s *orderStore) setStatus(ctx context.Context, order, status string) error {
	_, err := s.db.ExecContext(ctx,
		`UPDATE seckill_orders SET status = $1 WHERE order_id = $2 AND status = $3`, status, order, stateUnpaid)
	if err != nil {
		return fmt.Errorf("orders: set %s %s: %w", order, status, err)
	}
	return nil
}

// status returns the status of order's row, and whether there is one.
func (s *orderStore) status(ctx context.Context, order string) (string, bool, error) {
	var st string
	err := s.db.QueryRowContext(ctx, `SELECT status FROM seckill_orders WHERE order_id = $1`, order).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("orders: status of %s: %w", order, err)
	}
	return st, true, nil
}

// saleSummary counts a sale's rows.
type saleSummary struct {
	Orders, Users            int64 // rows, distinct users among them
	Unpaid, Paid, Cancelled  int64
	FirstPlaced, LastWritten time.Time
}

func (s *orderStore) summary(ctx context.Context, sale string) (saleSummary, error) {
	var (
		sum         saleSummary
		first, last sql.NullInt64
	)
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT user_id),
		COALESCE(SUM(CASE WHEN status = $1 THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN status = $2 THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN status = $3 THEN 1 ELSE 0 END), 0),
		MIN(placed_at), MAX(written_at)
		FROM seckill_orders WHERE sale_id = $4`, stateUnpaid, statePaid, stateCancelled, sale).
		Scan(&sum.Orders, &sum.Users, &sum.Unpaid, &sum.Paid, &sum.Cancelled, &first, &last)
	if err != nil {
		return sum, fmt.Errorf("orders: summary of %s: %w", sale, err)
	}
	if first.Valid {
		sum.FirstPlaced = time.UnixMilli(first.Int64)
	}
	if last.Valid {
		sum.LastWritten = time.UnixMilli(last.Int64)
	}
	return sum, nil
}

// userOrders returns the order IDs of user in sale: at most one, by the
// table's constraint.
func (s *orderStore) userOrders(ctx context.Context, sale, user string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT order_id FROM seckill_orders WHERE sale_id = $1 AND user_id = $2`, sale, user)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// deleteSale removes a sale's rows.
func (s *orderStore) deleteSale(ctx context.Context, sale string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM seckill_orders WHERE sale_id = $1`, sale); err != nil {
		return fmt.Errorf("orders: delete sale %s: %w", sale, err)
	}
	return nil
}

// redactURL hides the password of a database URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
