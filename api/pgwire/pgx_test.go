package pgwire_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/api/pgwire"
)

// writeAll runs every way pgx writes, each in its own transaction, and
// returns the first error.
func writeAll(ctx context.Context, c *pgx.Conn, table, tag string) error {
	if _, err := c.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", tag+"-exec"); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ('"+tag+"-simple')"); err != nil {
		return fmt.Errorf("exec without arguments (simple protocol): %w", err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE v LIKE $1", tag+"%").Scan(&n); err != nil {
		return fmt.Errorf("query: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue("INSERT INTO "+table+" (v) VALUES ($1)", tag+"-batch1")
	b.Queue("INSERT INTO "+table+" (v) VALUES ($1)", tag+"-batch2")
	b.Queue("SELECT count(*) FROM " + table)
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if _, err := c.CopyFrom(ctx, pgx.Identifier{table}, []string{"v"}, pgx.CopyFromRows([][]any{{tag + "-copy1"}, {tag + "-copy2"}})); err != nil {
		return fmt.Errorf("copy from: %w", err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", tag+"-tx1"); err != nil {
		return fmt.Errorf("tx exec: %w", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ($1)", tag+"-tx2"); err != nil {
		return fmt.Errorf("tx exec: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

const writesPerRun = 8

// TestPgxCurrentStaleAndSetToken: pgx writes through the listener with the
// leader's token; after a new leader wrote, the zombie's every way of
// writing is refused with FG001 and nothing of it is stored; SET
// fencegate.token moves the session to the new term.
func TestPgxCurrentStaleAndSetToken(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "pgx_jobs")
	old, resign := e.lead(t, "pgxjobs")
	zombie := e.connect(t, "pgxjobs", old)
	if err := writeAll(ctx, zombie, "pgx_jobs", "a"); err != nil {
		t.Fatalf("current token: %v", err)
	}
	if got := e.count(t, "pgx_jobs"); got != writesPerRun {
		t.Fatalf("got %d rows, want %d", got, writesPerRun)
	}
	resign()
	cur, _ := e.lead(t, "pgxjobs")
	leader := e.connect(t, "pgxjobs", cur)
	if _, err := leader.Exec(ctx, "INSERT INTO pgx_jobs (v) VALUES ('new-leader')"); err != nil {
		t.Fatalf("new leader: %v", err)
	}
	before := e.count(t, "pgx_jobs")
	err := writeAll(ctx, zombie, "pgx_jobs", "zombie")
	if err == nil {
		t.Fatal("zombie wrote with a stale token")
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "FG001" && pe.Code != "FG002") || !strings.HasPrefix(pe.Message, "fencegate: ") {
		t.Fatalf("got %v, want a fencegate FG001 or FG002 error", err)
	}
	if got := e.count(t, "pgx_jobs"); got != before {
		t.Fatalf("zombie stored %d rows", got-before)
	}
	if _, err := zombie.Exec(ctx, fmt.Sprintf("SET fencegate.token = %d", cur)); err != nil {
		t.Fatalf("SET fencegate.token: %v", err)
	}
	if err := writeAll(ctx, zombie, "pgx_jobs", "b"); err != nil {
		t.Fatalf("after SET fencegate.token: %v", err)
	}
	if got := e.count(t, "pgx_jobs"); got != before+writesPerRun {
		t.Fatalf("got %d rows, want %d", got, before+writesPerRun)
	}
}
