package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRedTeam20EndSessionAnyBackend: migration 009 says end_session lets
// "fencegate's own login ... stop the sessions of its listener and no
// others", and gives fencegate_owner pg_signal_backend for it. But the
// only proof that a backend is a listener session is a row of
// fencegate.sessions, which the same fencegate_runtime writes with
// bind_session for any process id and login it names, live or not: so a
// member of fencegate_runtime (fencegate's login of one deployment) binds
// any non-superuser backend of the cluster (another database's, another
// application's, whose login it reads from pg_stat_activity) and
// terminates it. Low severity: fencegate's login is trusted, and may
// already move every fence's mark of its own database; the gap is the
// amplification to pg_signal_backend over the whole cluster, other
// databases and deployments included (fencegate_runtime is cluster-wide).
//
// What happened: a backend of an unrelated login, in another database,
// never a listener session, is terminated.
//
// What should happen: bind_session should bind only a backend of this
// database (pg_stat_activity.datid) logged in as the login named, not a
// member of fencegate_runtime, that is not bound already; or end_session
// should be refused for one bound after it started (the binding's time
// against backend_start, which fencegate_owner can read once it is a
// member of pg_read_all_stats).
func TestRedTeam20EndSessionAnyBackend(t *testing.T) {
	ctx := t.Context()
	admin, pool := runtimeConn(t) // fencegate's login of this deployment
	// An unrelated application's session in another database.
	other := connect(t, freshDB(t))
	victim := fmt.Sprintf("rt20_app_%d", dbSeq.Add(1))
	if _, err := other.Exec(ctx, "CREATE ROLE "+victim+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	cfg := other.Config().Copy()
	cfg.User = victim
	app, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.WithoutCancel(ctx))
	pid := int32(app.PgConn().PID())

	var login string
	if err := pool.QueryRow(ctx, "SELECT usename FROM pg_stat_activity WHERE pid = $1", pid).Scan(&login); err != nil {
		t.Fatal(err)
	}
	// From migration 014 bind_session refuses it
	// (TestBindSessionOnlyLiveListenerLogins); a binding written before
	// that, here by the superuser, must still end nothing.
	if _, err := pool.Exec(ctx, "SELECT fencegate.bind_session($1, $2, 'any', NULL, NULL)", pid, login); err == nil {
		t.Error("bind_session bound a backend of another database")
	}
	if _, err := admin.Exec(ctx, "INSERT INTO fencegate.sessions (pid, login, fence) VALUES ($1, $2, 'any') ON CONFLICT DO NOTHING", pid, login); err != nil {
		t.Fatal(err)
	}
	var ended bool
	if err := pool.QueryRow(ctx, "SELECT fencegate.end_session($1)", pid).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := app.Ping(ctx); err != nil || ended {
		t.Errorf("HOLE: fencegate_runtime terminated a backend of another database that was never a listener session (end_session returned %v; the application's next query: %v)", ended, err)
	}
}
