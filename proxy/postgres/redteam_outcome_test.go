package postgres

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/tokens"
)

// Red team, outcome honesty: what a write is answered must be true of the
// database. An accepted write is committed; a definite refusal wrote
// nothing; "outcome": "unknown" is always honest. Every test below reads
// the database afterwards and checks each answer against it.

// rtoHonest checks one write's answer against whether its marker row is
// in the database.
func rtoHonest(t *testing.T, name string, err error, present bool) {
	t.Helper()
	if err == nil {
		if !present {
			t.Errorf("%s: answered accepted, but its row is not in the database (acknowledged write lost)", name)
		}
		return
	}
	r, ok := tokens.AsRefusal(err)
	if !ok {
		t.Errorf("%s: answered %v (%T), not a refusal", name, err, err)
		return
	}
	if r.Metadata["outcome"] == "unknown" {
		t.Logf("%s: outcome unknown (row present: %v): %v", name, present, err)
		return
	}
	if present {
		t.Errorf("%s: answered a definite refusal %s (%v, metadata %v), but its row IS in the database", name, r.Reason, err, r.Metadata)
		return
	}
	t.Logf("%s: refused %s, nothing written (honest): %v", name, r.Reason, err)
}

// rtoMarkers returns the markers in table's column m.
func rtoMarkers(t *testing.T, db *pgx.Conn, table string) map[string]bool {
	t.Helper()
	rows, err := db.Query(t.Context(), "SELECT m FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range got {
		out[m] = true
	}
	return out
}

// rtoLocker holds a row lock of table lk in an open transaction on a
// connection of its own until release.
type rtoLocker struct {
	conn *pgx.Conn
	tx   pgx.Tx
}

func rtoLock(t *testing.T, table string, id int) *rtoLocker {
	t.Helper()
	conn := admin(t)
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), fmt.Sprintf("SELECT v FROM %s WHERE id = %d FOR UPDATE", table, id)); err != nil {
		t.Fatal(err)
	}
	l := &rtoLocker{conn: conn, tx: tx}
	t.Cleanup(func() { _ = l.tx.Rollback(context.WithoutCancel(t.Context())) })
	return l
}

func (l *rtoLocker) release(t *testing.T) {
	t.Helper()
	if err := l.tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// rtoWaitLock waits until a session of application app waits on a lock
// with a statement containing like (SQL LIKE pattern).
func rtoWaitLock(t *testing.T, db *pgx.Conn, app, like string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pid int
		err := db.QueryRow(t.Context(), `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2`, app, like).Scan(&pid)
		if err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session of %s waiting on a lock in %q: %v", app, like, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rtoQueueLen is the number of writes waiting in b's coalescer.
func rtoQueueLen(b *Backend) int { return b.co.Queued() }

// rtoQueued waits until n calls are queued in b's coalescer.
func rtoQueued(t *testing.T, b *Backend, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := rtoQueueLen(b)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued: got %d, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// rtoSetup makes the marker table out(m text) and the lock table lk with
// rows 0..3.
func rtoSetup(t *testing.T, db *pgx.Conn) (out, lk string) {
	t.Helper()
	out, lk = unique("rto_out"), unique("rto_lk")
	mustExec(t, db, "CREATE TABLE "+out+"(m text PRIMARY KEY)")
	mustExec(t, db, "CREATE TABLE "+lk+"(id int PRIMARY KEY, v int NOT NULL)")
	mustExec(t, db, "INSERT INTO "+lk+" SELECT g, 0 FROM generate_series(0, 3) g")
	return out, lk
}

func rtoInsert(out, m string) Statement {
	return Statement{SQL: "INSERT INTO " + out + "(m) VALUES ($1)", Params: []any{m}}
}

func rtoTouch(lk string, id int) Statement {
	return Statement{SQL: fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = %d", lk, id)}
}

// rtoBatchOfTwo runs X alone (blocked on row 0), queues A and B behind it
// so they go out in one pipeline, releases row 0 and returns when A is
// blocked on row 1 in the server. A and B's answers arrive on the
// channels.
func rtoBatchOfTwo(t *testing.T, b *Backend, app string, db *pgx.Conn, out, lk string,
	stmtsA, stmtsB []Statement, ctxA, ctxB context.Context, //nolint:revive // each write's context goes with its statements
) (errA, errB chan error, lock1 *rtoLocker) {
	t.Helper()
	lock0 := rtoLock(t, lk, 0)
	lock1 = rtoLock(t, lk, 1)
	errX := make(chan error, 1)
	go func() {
		_, err := b.Exec(t.Context(), unique("rto_fx"), 1, []Statement{rtoInsert(out, "X"), rtoTouch(lk, 0)})
		errX <- err
	}()
	rtoWaitLock(t, db, app, fmt.Sprintf("%%id = %d%%", 0))
	errA, errB = make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := b.Exec(ctxA, unique("rto_fa"), 1, stmtsA)
		errA <- err
	}()
	rtoQueued(t, b, 1)
	go func() {
		_, err := b.Exec(ctxB, unique("rto_fb"), 1, stmtsB)
		errB <- err
	}()
	rtoQueued(t, b, 2)
	lock0.release(t)
	if err := <-errX; err != nil {
		t.Fatalf("X: %v", err)
	}
	rtoWaitLock(t, db, app, fmt.Sprintf("%%id = %d%%", 1))
	return errA, errB, lock1
}

// TestRedTeamOutcomeWatchdogCancelLandsOnNextWrite: write A of a batch
// runs past its time limit, blocked on a row lock; the watchdog's cancel
// request is held up (the postmaster, which forwards cancel requests, is
// paused with SIGSTOP), A's lock is released so A commits, and B, the next
// write of the same pipeline, is running (blocked on another row) when
// the postmaster resumes and the cancel lands. Each answer must match the
// database.
func TestRedTeamOutcomeWatchdogCancelLandsOnNextWrite(t *testing.T) {
	for _, where := range []string{"statement", "commit"} {
		t.Run(where, func(t *testing.T) {
			app := unique("rto_wd")
			b := openBackend(t, Config{MaxConns: 1, WriteTimeout: 400 * time.Millisecond, StatementTimeout: 10 * time.Second, ApplicationName: app})
			db := admin(t)
			out, lk := rtoSetup(t, db)
			stmtsB := []Statement{rtoInsert(out, "B"), rtoTouch(lk, 2)}
			likeB := "%id = 2%"
			if where == "commit" {
				// B's own statement is quick; a deferred constraint
				// trigger blocks its commit on row 2.
				dt := unique("rto_dt")
				fn := unique("rto_fn")
				mustExec(t, db, "CREATE TABLE "+dt+"(m text)")
				mustExec(t, db, fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN INSERT INTO %s(m) VALUES ('B'); PERFORM v FROM %s WHERE id = 2 FOR UPDATE; RETURN NULL; END $$`, fn, out, lk))
				mustExec(t, db, fmt.Sprintf("CREATE CONSTRAINT TRIGGER %s AFTER INSERT ON %s DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION %s()", fn, dt, fn))
				stmtsB = []Statement{{SQL: "INSERT INTO " + dt + "(m) VALUES ('b')"}}
				likeB = "%" + dt + "%"
			}
			lock2 := rtoLock(t, lk, 2)
			errA, errB, lock1 := rtoBatchOfTwo(t, b, app, db, out, lk,
				[]Statement{rtoInsert(out, "A"), rtoTouch(lk, 1)}, stmtsB, t.Context(), t.Context())

			pm := server.PID()
			if err := syscall.Kill(pm, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					_ = syscall.Kill(pm, syscall.SIGCONT)
				}
			}
			defer resume()
			// Past A's limit: the watchdog fires and its cancel request
			// waits in the paused postmaster's backlog.
			time.Sleep(1500 * time.Millisecond)
			lock1.release(t)
			rtoWaitLock(t, db, app, likeB)
			resume()
			var eb error
			select {
			case eb = <-errB:
			case <-time.After(5 * time.Second):
				// The cancel did not land (or landed elsewhere): let B go.
				lock2.release(t)
				eb = <-errB
			}
			ea := <-errA
			_ = lock2.tx.Rollback(t.Context())
			got := rtoMarkers(t, db, out)
			rtoHonest(t, "A", ea, got["A"])
			rtoHonest(t, "B", eb, got["B"])
		})
	}
}

// TestRedTeamOutcomeTerminateMidBatch: the server connection of a batch of
// three writes is terminated (pg_terminate_backend) while the first is
// blocked on a row lock; the other two are in the same pipeline.
func TestRedTeamOutcomeTerminateMidBatch(t *testing.T) {
	app := unique("rto_term")
	b := openBackend(t, Config{MaxConns: 1, WriteTimeout: 10 * time.Second, StatementTimeout: 10 * time.Second, ApplicationName: app})
	db := admin(t)
	out, lk := rtoSetup(t, db)
	lock0 := rtoLock(t, lk, 0)
	lock1 := rtoLock(t, lk, 1)
	errX := make(chan error, 1)
	go func() {
		_, err := b.Exec(t.Context(), unique("rto_fx"), 1, []Statement{rtoInsert(out, "X"), rtoTouch(lk, 0)})
		errX <- err
	}()
	rtoWaitLock(t, db, app, "%id = 0%")
	names := []string{"A", "B", "C"}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, m := range names {
		stmts := []Statement{rtoInsert(out, m)}
		if i == 0 {
			stmts = append(stmts, rtoTouch(lk, 1))
		}
		wg.Go(func() { _, errs[i] = b.Exec(t.Context(), unique("rto_f"), 1, stmts) })
		rtoQueued(t, b, i+1)
	}
	lock0.release(t)
	if err := <-errX; err != nil {
		t.Fatalf("X: %v", err)
	}
	pid := rtoWaitLock(t, db, app, "%id = 1%")
	if _, err := db.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	lock1.release(t)
	got := rtoMarkers(t, db, out)
	for i, m := range names {
		rtoHonest(t, m, errs[i], got[m])
	}
}

// TestRedTeamOutcomeCallersLeaveBatch: both callers of a two-write batch
// give up (their contexts end) while the first write is blocked; the
// batch's I/O is abandoned. Then the lock is released. The pipeline's
// messages are already in the server: it may still run and commit them.
func TestRedTeamOutcomeCallersLeaveBatch(t *testing.T) {
	app := unique("rto_leave")
	b := openBackend(t, Config{MaxConns: 1, WriteTimeout: 10 * time.Second, StatementTimeout: 10 * time.Second, ApplicationName: app})
	db := admin(t)
	out, lk := rtoSetup(t, db)
	ctxA, cancelA := context.WithCancel(t.Context())
	ctxB, cancelB := context.WithCancel(t.Context())
	errA, errB, lock1 := rtoBatchOfTwo(t, b, app, db, out, lk,
		[]Statement{rtoInsert(out, "A"), rtoTouch(lk, 1)}, []Statement{rtoInsert(out, "B")}, ctxA, ctxB)
	cancelA()
	ea := <-errA
	cancelB()
	eb := <-errB
	lock1.release(t)
	// Until the server is done with the abandoned connection.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := rtoMarkers(t, db, out)
	rtoHonest(t, "A", ea, got["A"])
	rtoHonest(t, "B", eb, got["B"])
}

// TestRedTeamOutcomeLoneCallerCancelled: a lone write (no batch) whose
// caller's context ends while it is blocked in the server.
func TestRedTeamOutcomeLoneCallerCancelled(t *testing.T) {
	app := unique("rto_lone")
	b := openBackend(t, Config{MaxConns: 1, WriteTimeout: 10 * time.Second, StatementTimeout: 10 * time.Second, ApplicationName: app})
	db := admin(t)
	out, lk := rtoSetup(t, db)
	lock1 := rtoLock(t, lk, 1)
	ctx, cancel := context.WithCancel(t.Context())
	errA := make(chan error, 1)
	go func() {
		_, err := b.Exec(ctx, unique("rto_fa"), 1, []Statement{rtoInsert(out, "A"), rtoTouch(lk, 1)})
		errA <- err
	}()
	rtoWaitLock(t, db, app, "%id = 1%")
	cancel()
	ea := <-errA
	lock1.release(t)
	time.Sleep(200 * time.Millisecond)
	// The next write on the backend must not be confused by the first.
	_, eb := b.Exec(t.Context(), unique("rto_fb"), 1, []Statement{rtoInsert(out, "B")})
	got := rtoMarkers(t, db, out)
	rtoHonest(t, "A", ea, got["A"])
	rtoHonest(t, "B", eb, got["B"])
}
