package pgwire_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/proxy/postgres"
)

// TestRedTeam3BindPoolExhausted: with fencegate's own pool exhausted (its
// one connection held by a write waiting for a lock), a listener login
// cannot be bound. The client must get a clear FATAL saying so, within
// the startup timeout, and nothing of the session may be left bound.
// prepare waits for BindSession for up to StartupTimeout counted from
// after the login, so by the time it gives up the server connection's
// startup deadline (set before the login) has passed: the prepare's
// answers, long arrived, are read past the deadline, and the client is
// told the database did not answer, not that fencegate's own pool had no
// connection to bind with (whatever the reason the bind failed, a slow
// bind is always reported as a database that did not answer).
func TestRedTeam3BindPoolExhausted(t *testing.T) {
	ctx := t.Context()
	cfg := postgres.DefaultConfig()
	cfg.MaxConns = 1
	cfg.StatementTimeout, cfg.WriteTimeout = 20*time.Second, 20*time.Second
	pool, err := postgres.Open(ctx, gatewayDSN, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := newEnv(t, pgwire.Config{Sessions: pool, StartupTimeout: time.Second})
	e.table(t, "rt3bindpool")
	if _, err := e.admin.Exec(ctx, "GRANT INSERT ON rt3bindpool TO gateway; GRANT USAGE ON SEQUENCE rt3bindpool_id_seq TO gateway"); err != nil {
		t.Fatal(err)
	}
	tok, _ := e.lead(t, "rt3bindpool")

	// Hold the pool's one connection: a write waiting for a lock.
	locker, err := pgx.Connect(ctx, pgServer.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE rt3bindpool IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = pool.Exec(ctx, "rt3bindpool-held", 1, []postgres.Statement{{SQL: "INSERT INTO rt3bindpool (v) VALUES ('held')"}})
	}()
	time.Sleep(500 * time.Millisecond) // the write holds the connection

	start := time.Now()
	_, err = pgx.Connect(ctx, e.dsn("worker", "rt3bindpool", tok))
	d := time.Since(start)
	t.Logf("login with fencegate's pool exhausted: %v after %v", err, d)
	if err == nil {
		t.Fatal("login succeeded with no connection to bind it with")
	}
	if d > 3*time.Second {
		t.Errorf("login refused after %v, want within the startup timeout (1s) and a moment", d)
	}
	if !strings.Contains(err.Error(), "bind") {
		t.Errorf("login refused with %q: want a FATAL saying fencegate could not bind the session (its own pool), not that the database did not answer", err)
	}
	_ = tx.Rollback(ctx)
	wg.Wait()
	time.Sleep(3 * time.Second) // unbind's own timeout
	var n int
	if err := e.admin.QueryRow(ctx, "SELECT count(*) FROM fencegate.sessions WHERE fence = 'rt3bindpool'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d bindings of the refused login left in fencegate.sessions", n)
	}
	c, err := pgx.Connect(ctx, e.dsn("worker", "rt3bindpool", tok))
	if err != nil {
		t.Fatalf("login once the pool is free: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "INSERT INTO rt3bindpool (v) VALUES ('after')"); err != nil {
		t.Errorf("write once the pool is free: %v", err)
	}
}
