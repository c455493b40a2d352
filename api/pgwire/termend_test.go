package pgwire_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestTermEndsOpenTransaction: a zombie that opened a transaction through
// fencegate and then stopped (a paused process, or one stuck in a long
// statement) holds the fence's row with its check, and the next leader's
// first write waits for that row. When the zombie's term ends, fencegate
// ends its transaction: the server rolls it back, the zombie gets FATAL
// with the refusal's SQLSTATE, and the next leader's write goes through.
// Without it, that write waits as long as the zombie does: here, until its
// 10 s deadline.
func TestTermEndsOpenTransaction(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	for _, tc := range []struct {
		name    string
		running bool // the zombie is in a statement, not waiting
		leader  bool // a new leader follows; else the election has none
	}{
		{name: "idle", leader: true},
		{name: "running", running: true, leader: true},
		{name: "noleader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fence := "ended-" + tc.name
			e.table(t, "ended_"+tc.name)
			insert := "INSERT INTO ended_" + tc.name + " (v) VALUES ($1)"
			old, resign := e.lead(t, fence)
			z := e.connect(t, fence, old)
			var pid int32
			if err := z.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			tx, err := z.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, insert, "zombie"); err != nil {
				t.Fatal(err)
			}
			zerr := make(chan error, 1)
			if tc.running {
				rctx, stop := context.WithCancel(ctx)
				ran := make(chan struct{})
				go func() {
					defer close(ran)
					_, err := tx.Exec(rctx, "SELECT pg_sleep(60)")
					zerr <- err
				}()
				t.Cleanup(func() { stop(); <-ran }) // before z closes
				e.waitFor(t, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%'", pid)
			}
			// A term that holds keeps its transaction: several sweeps
			// pass and it is still open.
			time.Sleep(500 * time.Millisecond)
			if got := e.countWhere(t, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid); got != 1 {
				t.Fatalf("the leader's open transaction ended while its term held")
			}

			resign()
			write := func(cur uint64) {
				t.Helper()
				n := e.connect(t, fence, cur)
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if _, err := n.Exec(wctx, insert, "leader"); err != nil {
					t.Fatalf("the new leader's write: %v", err)
				}
			}
			if tc.leader {
				cur, _ := e.lead(t, fence)
				write(cur)
			}
			// fencegate ended the zombie's transaction: its server
			// connection is gone, and the zombie is told why.
			e.waitFor(t, "SELECT 1 - count(*) FROM pg_stat_activity WHERE pid = $1", pid)
			if !tc.running {
				go func() { zerr <- tx.Commit(ctx) }()
			}
			select {
			case err := <-zerr:
				// Between the resignation and the next leader the
				// election has none: TERM_ENDED (FG002) or, once the
				// next term is seen, STALE_TOKEN (FG001).
				code := "FG002"
				if pe, ok := errors.AsType[*pgconn.PgError](err); ok && tc.leader && pe.Code == "FG001" {
					code = "FG001"
				}
				pe := wantCode(t, err, code)
				t.Logf("zombie: %s %s: %s", pe.Severity, pe.Code, pe.Message)
				if pe.Severity != "FATAL" {
					t.Fatalf("zombie got %s, want FATAL", pe.Severity)
				}
				// Rolled back for certain only when nothing was in
				// flight: a running statement may have been a COMMIT.
				if sure := strings.Contains(pe.Message, "rolled back"); sure == tc.running {
					t.Fatalf("zombie told %q: says rolled back %v, with a statement running %v", pe.Message, sure, tc.running)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the zombie's statement still runs")
			}
			if !tc.leader {
				cur, _ := e.lead(t, fence)
				write(cur)
			}
			if vs := e.values(t, "ended_"+tc.name); len(vs) != 1 || vs[0] != "leader" {
				t.Fatalf("rows %q, want only the new leader's", vs)
			}
		})
	}
}

// countWhere runs a count query as the admin.
func (e *env) countWhere(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor waits up to 10 s for a count query to answer 1.
func (e *env) waitFor(t *testing.T, sql string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.countWhere(t, sql, args...) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s, still not %s", sql)
		}
	}
}

// TestEndedTransactionSendsNothingMore: once fencegate has decided to end
// a transaction waiting for its client, nothing the client sends reaches
// the server, so "rolled back" is the truth even when the client's COMMIT
// comes in between: here the COMMIT is sent while fencegate, held by a
// test hook, has decided but not yet closed the server connection. Without
// the gate, that COMMIT commits the zombie's row, and the zombie is told
// it committed.
func TestEndedTransactionSendsNothingMore(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	deciding, release := make(chan struct{}), make(chan struct{})
	e.srv.SetTestHookEnding(func() { close(deciding); <-release })
	fence := "ended-gate"
	e.table(t, "ended_gate")
	old, resign := e.lead(t, fence)
	z := e.connect(t, fence, old)
	tx, err := z.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ended_gate (v) VALUES ('zombie')"); err != nil {
		t.Fatal(err)
	}
	resign()
	select {
	case <-deciding:
	case <-time.After(10 * time.Second):
		t.Fatal("fencegate did not end the transaction of an ended term")
	}
	cerr := make(chan error, 1)
	go func() { cerr <- tx.Commit(ctx) }()
	time.Sleep(300 * time.Millisecond) // the COMMIT, unhindered, would be answered by now
	close(release)
	err = <-cerr
	pe := wantCode(t, err, "FG002")
	if !strings.Contains(pe.Message, "rolled back") {
		t.Fatalf("zombie told %q, want rolled back", pe.Message)
	}
	if n := e.count(t, "ended_gate"); n != 0 {
		t.Fatalf("%d rows stored by a COMMIT fencegate said was rolled back", n)
	}
}

// TestMonotonicTokenEndsOpenTransaction: with a monotonic fence (any
// token above the last is a new term), a writer's higher token ends the
// transaction the holder of the lower one left open: the pipeline learns
// the new term from that write's own verification, the write waits for
// the row only until the listener ends the old transaction, and only the
// new writer's row is stored. Without the listener's check, the write
// waits for its 10 s deadline.
func TestMonotonicTokenEndsOpenTransaction(t *testing.T) {
	ctx := t.Context()
	e := newEnvWith(t, pgwire.Config{}, envOptions{termSources: "mono-*=monotonic"})
	e.table(t, "mono_ended")
	fence := fmt.Sprintf("mono-ended-%d", time.Now().UnixNano()) // its mark outlives the test
	z := e.connect(t, fence, 5)
	tx, err := z.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO mono_ended (v) VALUES ('token 5')"); err != nil {
		t.Fatal(err)
	}
	n := e.connect(t, fence, 6)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := n.Exec(wctx, "INSERT INTO mono_ended (v) VALUES ('token 6')"); err != nil {
		t.Fatalf("the write with token 6: %v", err)
	}
	pe := wantCode(t, tx.Commit(ctx), "FG001")
	if pe.Severity != "FATAL" || !strings.Contains(pe.Message, "token 5 is below the current term 6; its open transaction is rolled back") {
		t.Fatalf("token 5's COMMIT: got %s %q", pe.Severity, pe.Message)
	}
	if got := e.values(t, "mono_ended"); len(got) != 1 || got[0] != "token 6" {
		t.Fatalf("rows %q, want only token 6's", got)
	}
}

// TestForgedTokenEndsNothing: a client with a made-up token above the
// leader's cannot end the leader's open transaction: its write is refused
// (UNKNOWN_TERM, after etcd says no leader held it), the term in memory
// stays the leader's, and the leader's transaction commits.
func TestForgedTokenEndsNothing(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "ended_forged")
	tok, _ := e.lead(t, "ended-forged")
	l := e.connect(t, "ended-forged", tok)
	tx, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ended_forged (v) VALUES ('leader')"); err != nil {
		t.Fatal(err)
	}
	f := e.connect(t, "ended-forged", tok+1000)
	_, err = f.Exec(ctx, "INSERT INTO ended_forged (v) VALUES ('forger')")
	wantCode(t, err, "FG003")
	time.Sleep(500 * time.Millisecond) // five checks
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the leader's COMMIT after a forger's write: %v", err)
	}
	if vs := e.values(t, "ended_forged"); len(vs) != 1 || vs[0] != "leader" {
		t.Fatalf("rows %q, want only the leader's", vs)
	}
}

// TestFailedTransactionEnded: a transaction that failed is ended when
// its term ends, as an open one is: the status the server reports ('E')
// does not tell a block whose error aborted only a savepoint's
// subtransaction, whose top level still holds the fence's row
// (TestRedTeam4SubabortHoldsRow), from one whose locks are gone. The next
// leader's write does not wait, the zombie's session is gone, and its
// ROLLBACK finds the connection closed.
func TestFailedTransactionEnded(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "ended_failed")
	old, resign := e.lead(t, "ended-failed")
	z := e.connect(t, "ended-failed", old)
	var pid int32
	if err := z.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	pc := z.PgConn()
	for _, sql := range []string{"BEGIN", "INSERT INTO ended_failed (v) VALUES ('zombie')"} {
		if _, err := pc.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := pc.Exec(ctx, "SELECT 1/0").ReadAll(); err == nil {
		t.Fatal("SELECT 1/0 did not fail")
	}
	resign()
	cur, _ := e.lead(t, "ended-failed")
	n := e.connect(t, "ended-failed", cur)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := n.Exec(wctx, "INSERT INTO ended_failed (v) VALUES ('leader')"); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	gone := false
	for deadline := time.Now().Add(5 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		gone = e.countWhere(t, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid) == 0
	}
	if !gone {
		t.Fatal("the failed transaction's session outlived its term")
	}
	if _, err := pc.Exec(ctx, "ROLLBACK").ReadAll(); err == nil {
		t.Fatal("ROLLBACK on the ended session: no error")
	}
	if vs := e.values(t, "ended_failed"); len(vs) != 1 || vs[0] != "leader" {
		t.Fatalf("rows %q, want the leader's alone", vs)
	}
}

// TestEndedWhileNotReading: a zombie that pipelines queries and reads no
// answer, so fencegate's writes to it block, is still ended when its term
// ends: the next leader's write goes through, and the session is gone
// within seconds (the FATAL is given up on after a second).
func TestEndedWhileNotReading(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "ended_deaf")
	old, resign := e.lead(t, "ended-deaf")
	conn := e.hijack(t, "ended-deaf", old)
	msg := func(sql string) []byte {
		b := append([]byte{'Q', 0, 0, 0, 0}, sql...)
		b = append(b, 0)
		binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
		return b
	}
	if _, err := conn.Write(append(msg("BEGIN"), msg("INSERT INTO ended_deaf (v) VALUES ('zombie')")...)); err != nil {
		t.Fatal(err)
	}
	// Answers of a megabyte each, never read: the socket buffers fill and
	// fencegate's writes to this client block.
	big := msg("SELECT repeat('x', 1 << 20)")
	go func() {
		for range 64 {
			if _, err := conn.Write(big); err != nil {
				return
			}
		}
	}()
	time.Sleep(time.Second)
	open0, _ := e.srv.Connections()
	resign()
	cur, _ := e.lead(t, "ended-deaf")
	n := e.connect(t, "ended-deaf", cur)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := n.Exec(wctx, "INSERT INTO ended_deaf (v) VALUES ('leader')"); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if open, _ := e.srv.Connections(); open < open0+1 { // the leader's connection is new
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the zombie's session is still open after 10 s")
		}
	}
	if vs := e.values(t, "ended_deaf"); len(vs) != 1 || vs[0] != "leader" {
		t.Fatalf("rows %q, want only the leader's", vs)
	}
}

// TestServerGoneWhilePipelining: when the database ends a session's
// server connection while the client has queries queued behind a running
// one (fencegate waits for the running one's answer before it sends the
// next), the session ends; it used to wait for that answer for ever,
// holding its connection and goroutines.
func TestServerGoneWhilePipelining(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "gone")
	open0, _ := e.srv.Connections()
	conn := e.hijack(t, "gone", tok)
	var queries []byte
	for _, sql := range []string{"SELECT pg_sleep(30)", "SELECT 1", "SELECT 2"} {
		b := append([]byte{'Q', 0, 0, 0, 0}, sql...)
		b = append(b, 0)
		binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
		queries = append(queries, b...)
	}
	if _, err := conn.Write(queries); err != nil {
		t.Fatal(err)
	}
	// The statement runs behind fencegate's check, in one query string.
	const running = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT fencegate.advance%pg_sleep(30)'"
	e.waitFor(t, running)
	e.waitFor(t, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT fencegate.advance%pg_sleep(30)') AS t")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if open, _ := e.srv.Connections(); open <= open0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session whose server connection ended is still open after 10 s")
		}
	}
}
