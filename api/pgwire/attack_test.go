package pgwire_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/api/pgwire"
)

// fencedMark is what a statement stores to show whether its transaction
// ran the fence check: fencegate.advance sets fencegate.fenced to the
// fence for the rest of the transaction.
const fencedMark = "coalesce(nullif(current_setting('fencegate.fenced', true), ''), 'UNFENCED')"

// TestRefusedUnfenceable: everything that would run a statement outside a
// fenced transaction is refused with FG006 before the server runs any of
// it, and nothing is written.
func TestRefusedUnfenceable(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "atk")
	tok, _ := e.lead(t, "atk")
	for _, sql := range []string{
		"CREATE OR REPLACE PROCEDURE commit_inside() LANGUAGE plpgsql AS $$ BEGIN INSERT INTO atk (v) VALUES ('proc-1'); COMMIT; INSERT INTO atk (v) VALUES ('proc-2:' || " + fencedMark + "); END $$",
		"GRANT EXECUTE ON PROCEDURE commit_inside() TO worker",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	simple := []struct {
		name, setup, sql string
	}{
		{"COMMIT then a statement", "", "INSERT INTO atk (v) VALUES ('x'); COMMIT; INSERT INTO atk (v) VALUES ('late')"},
		{"COMMIT then a statement in a block", "BEGIN", "COMMIT; INSERT INTO atk (v) VALUES ('late')"},
		{"END then a statement", "BEGIN", "END; INSERT INTO atk (v) VALUES ('late')"},
		{"ROLLBACK then a statement", "BEGIN", "ROLLBACK; INSERT INTO atk (v) VALUES ('late')"},
		{"ABORT then a statement", "BEGIN", "ABORT; INSERT INTO atk (v) VALUES ('late')"},
		{"COMMIT AND CHAIN", "BEGIN", "COMMIT AND CHAIN"},
		{"ROLLBACK AND CHAIN", "BEGIN", "ROLLBACK AND CHAIN"},
		// A prepared transaction would keep the fence's row past the
		// session and its term. (This server refuses it too, with 55000:
		// max_prepared_transactions is 0; FG006 is fencegate's refusal.)
		{"PREPARE TRANSACTION", "BEGIN", "PREPARE TRANSACTION 'fg'"},
		{"SET fencegate.fenced", "BEGIN", "SET LOCAL fencegate.fenced = ''"},
		{"RESET fencegate.fenced", "BEGIN", "RESET fencegate.fenced"},
		{"set_config of fencegate", "", "SELECT set_config('fencegate.fenced', '', true)"},
		{"set_config of a computed name", "", "SELECT set_config('fence' || 'gate.fenced', '', true)"},
		{"SET fencegate.token in a block", "BEGIN", "SET fencegate.token = 1"},
		{"SET LOCAL fencegate.token", "", "SET LOCAL fencegate.token = 1"},
		{"a second advance", "", "SELECT fencegate.advance('other', 1)"},
		{"the fences table", "", "UPDATE fencegate.fences SET token = 1"},
		{"a reserved statement name", "", "PREPARE fencegate_check AS SELECT 1"},
	}
	for _, tc := range simple {
		t.Run("simple/"+tc.name, func(t *testing.T) {
			c := e.connect(t, "atk", tok)
			before := e.count(t, "atk")
			if tc.setup != "" {
				if _, err := c.Exec(ctx, tc.setup); err != nil {
					t.Fatal(err)
				}
			}
			_, err := c.PgConn().Exec(ctx, tc.sql).ReadAll()
			code := wantCodeOf(err)
			if tc.setup == "BEGIN" {
				// What the client would do next: write and commit. After
				// the refusal the block is aborted and nothing commits.
				_, _ = c.Exec(ctx, "INSERT INTO atk (v) SELECT 'late:' || "+fencedMark)
				_, _ = c.Exec(ctx, "COMMIT")
			}
			_, _ = c.Exec(ctx, "ROLLBACK")
			if got := e.count(t, "atk"); got != before {
				t.Fatalf("got %d rows written (%q), want none", got-before, e.values(t, "atk"))
			}
			if code != "FG006" {
				t.Fatalf("got %v, want SQLSTATE FG006", err)
			}
			if got := e.count(t, "atk"); got != before {
				t.Fatalf("got %d rows written, want none", got-before)
			}
			// The session goes on.
			if _, err := c.Exec(ctx, "INSERT INTO atk (v) VALUES ('after')"); err != nil {
				t.Fatalf("after the refusal: %v", err)
			}
		})
	}

	// In a string of several statements, PostgreSQL runs CALL and DO
	// atomically, so a COMMIT in them fails instead of ending the fenced
	// transaction.
	for _, sql := range []string{
		"CALL commit_inside()",
		"DO $$ BEGIN INSERT INTO atk (v) VALUES ('do-1'); COMMIT; INSERT INTO atk (v) VALUES ('do-2'); END $$",
	} {
		t.Run("simple/atomic "+sql[:4], func(t *testing.T) {
			c := e.connect(t, "atk", tok)
			before := e.count(t, "atk")
			_, err := c.PgConn().Exec(ctx, sql).ReadAll()
			wantCode(t, err, "2D000") // invalid transaction termination
			if got := e.count(t, "atk"); got != before {
				t.Fatalf("got %d rows written, want none", got-before)
			}
		})
	}

	extended := []struct{ name, sql string }{
		{"CALL", "CALL commit_inside()"},
		{"DO", "DO $$ BEGIN COMMIT; END $$"},
		{"COMMIT AND CHAIN", "COMMIT AND CHAIN"},
		{"PREPARE TRANSACTION", "PREPARE TRANSACTION 'fg'"},
		{"set_config", "SELECT set_config('fencegate.fenced', $1, true)"},
	}
	for _, tc := range extended {
		t.Run("extended/"+tc.name, func(t *testing.T) {
			c := e.connect(t, "atk", tok)
			before := e.count(t, "atk")
			var args [][]byte
			if strings.Contains(tc.sql, "$1") {
				args = [][]byte{[]byte("")}
			}
			rr := c.PgConn().ExecParams(ctx, tc.sql, args, nil, nil, nil).Read()
			if got := e.count(t, "atk"); got != before {
				t.Fatalf("got %d rows written (%q), want none", got-before, e.values(t, "atk"))
			}
			wantCode(t, rr.Err, "FG006")
			if _, err := c.Exec(ctx, "INSERT INTO atk (v) VALUES ($1)", "after"); err != nil {
				t.Fatalf("after the refusal: %v", err)
			}
		})
	}
}

// TestPipelineCommitThenMore: statements pipelined after a COMMIT, before
// the Sync, run in a new transaction; fencegate checks the fence again
// in front of them.
func TestPipelineCommitThenMore(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "pipe")
	tok, _ := e.lead(t, "pipe")
	c := e.connect(t, "pipe", tok)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("INSERT INTO pipe (v) VALUES ($1)", "in-block")
	b.Queue("COMMIT")
	b.Queue("INSERT INTO pipe (v) SELECT 'after-commit:' || "+fencedMark+" WHERE $1::int = 1", 1)
	b.Queue("INSERT INTO pipe (v) SELECT 'after-commit-2:' || "+fencedMark+" WHERE $1::int = 1", 1)
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := e.admin.Query(ctx, "SELECT v FROM pipe ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"in-block", "after-commit:pipe", "after-commit-2:pipe"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got rows %q, want %q (each transaction fenced)", got, want)
	}
}

// TestEveryTransactionFenced: reads, writes, explicit blocks and
// transactions after a refused one all run the fence check.
func TestEveryTransactionFenced(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "every")
	c := e.connect(t, "every", tok)
	check := func(what string, got string) {
		t.Helper()
		if got != "every" {
			t.Fatalf("%s: got fencegate.fenced %q, want %q", what, got, "every")
		}
	}
	var s string
	if err := c.QueryRow(ctx, "SELECT "+fencedMark).Scan(&s); err != nil {
		t.Fatal(err)
	}
	check("simple read", s)
	if err := c.QueryRow(ctx, "SELECT "+fencedMark+" WHERE $1::int = 1", 1).Scan(&s); err != nil {
		t.Fatal(err)
	}
	check("extended read", s)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := tx.QueryRow(ctx, "SELECT "+fencedMark+" WHERE $1::int = 1", 1).Scan(&s); err != nil {
			t.Fatal(err)
		}
		check("in a block", s)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A disconnect mid-transaction leaves nothing behind.
	e.table(t, "every_t")
	c2 := e.connect(t, "every", tok)
	if _, err := c2.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Exec(ctx, "INSERT INTO every_t (v) VALUES ('uncommitted')"); err != nil {
		t.Fatal(err)
	}
	c2.PgConn().Close(ctx)
	if got := e.count(t, "every_t"); got != 0 {
		t.Fatalf("got %d rows after a disconnect mid-transaction, want 0", got)
	}
}

func wantCodeOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func (e *env) values(t *testing.T, table string) []string {
	t.Helper()
	rows, err := e.admin.Query(t.Context(), "SELECT v FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestExecuteOfPreparedCommit: SQL EXECUTE of a statement the protocol
// prepared as COMMIT would end the fenced transaction in the middle of a
// string; it is refused.
func TestExecuteOfPreparedCommit(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "exe")
	tok, _ := e.lead(t, "exe")
	c := e.connect(t, "exe", tok)
	if _, err := c.PgConn().Prepare(ctx, "s_commit", "COMMIT", nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.PgConn().Exec(ctx, "EXECUTE s_commit; INSERT INTO exe (v) SELECT 'late:' || "+fencedMark).ReadAll()
	if got := e.count(t, "exe"); got != 0 {
		t.Fatalf("got rows %q, want none", e.values(t, "exe"))
	}
	wantCode(t, err, "FG006")
	// The same in the extended protocol, the name checked when the
	// Execute is sent.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("EXECUTE s_commit")
	b.Queue("INSERT INTO exe (v) SELECT 'late2:' || "+fencedMark+" WHERE $1::int = 1", 1)
	b.Queue("COMMIT")
	err = c.SendBatch(ctx, b).Close()
	if got := e.count(t, "exe"); got != 0 {
		t.Fatalf("got rows %q, want none", e.values(t, "exe"))
	}
	wantCode(t, err, "FG006")
}

// TestAttackConnections: connections beyond MaxConnections are refused
// as PostgreSQL refuses them, with 53300 after their startup message (TLS
// negotiated first); a cancel request is still honoured; past 64 such
// refusals at once, a connection gets the error before anything is read.
// A freed place is taken again.
func TestAttackConnections(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{MaxConnections: 2})
	fence := "conns"
	tok, _ := e.lead(t, fence)
	a := e.connect(t, fence, tok)
	e.connect(t, fence, tok)
	for _, mode := range []string{"disable", "prefer"} {
		dsn := strings.Replace(e.dsn("worker", fence, tok), "sslmode=disable", "sslmode="+mode, 1)
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			c.Close(ctx)
			t.Fatalf("third connection, sslmode=%s: got through, want 53300", mode)
		}
		if pe := wantCode(t, err, "53300"); pe.Message != "sorry, too many clients already" {
			t.Errorf("message: got %q, want PostgreSQL's", pe.Message)
		}
	}

	// A cancel request comes on a connection of its own: still honoured.
	errc := make(chan error, 1)
	go func() { _, err := a.Exec(ctx, "SELECT pg_sleep(30)"); errc <- err }()
	time.Sleep(200 * time.Millisecond)
	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatalf("CancelRequest: %v", err)
	}
	select {
	case err := <-errc:
		wantCode(t, err, "57014")
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel request at the limit did not cancel the statement")
	}

	// Connections that send nothing hold the refusals in progress; the
	// next one is answered at once.
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 64 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	time.Sleep(100 * time.Millisecond) // the listener has accepted them
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || len(got) == 0 || got[0] != 'E' || !strings.Contains(string(got), "53300") {
		t.Fatalf("connection past the refusals: got %q, %v; want an ErrorResponse 53300 and the end", got, err)
	}
	for _, c := range idle {
		c.Close()
	}
	if _, refused := e.srv.Connections(); refused != 3 {
		t.Errorf("refused: got %d, want 3 (the two 53300s after startup and the one at once; not the cancel)", refused)
	}

	a.Close(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.Connect(ctx, e.dsn("worker", fence, tok))
		if err == nil {
			c.Close(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection accepted after one of the two closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttackConnectionsReleased: connections that end every way a client
// can end one at startup (closed at once, garbage, an SSLRequest then
// nothing, a cancel request with a made-up key, a wrong fence) give their
// place back: with MaxConnections 2, after forty of them two clients
// still connect, and nothing stays counted.
func TestAttackConnectionsReleased(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{MaxConnections: 2})
	fence := "released"
	tok, _ := e.lead(t, fence)
	ssl := []byte{0, 0, 0, 8, 4, 210, 22, 47}                             // SSLRequest
	cancel := []byte{0, 0, 0, 16, 4, 210, 22, 46, 0, 0, 0, 1, 0, 0, 0, 2} // CancelRequest, made-up key
	for i := range 40 {
		switch i % 5 {
		case 0, 1, 2, 3:
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			switch i % 5 {
			case 1:
				_, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
			case 2:
				_, _ = c.Write(ssl)
			case 3:
				_, _ = c.Write(cancel)
			}
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, _ = c.Read(make([]byte, 64))
			c.Close()
		case 4:
			if c, err := pgx.Connect(ctx, e.dsn("worker", "no such fence {", tok)); err == nil {
				c.Close(ctx)
				t.Fatal("a fence name with '{' got through")
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if open, _ := e.srv.Connections(); open == 0 {
			break
		}
		if time.Now().After(deadline) {
			open, _ := e.srv.Connections()
			t.Fatalf("%d connections still counted after every client left", open)
		}
	}
	e.connect(t, fence, tok)
	e.connect(t, fence, tok)
}

// TestDynamicAdvanceRefused: a client cannot run the fence check itself
// for another fence. Its text never names fencegate's schema here: the
// SQL check cannot see into dynamic SQL, so the database refuses it. Its
// login may not run advance or advance_term at all (migration 008: the
// listener's check is advance_session, and the listener refuses a login
// that may run the others); advance_session, like advance since
// migration 007, runs only as its transaction's first statement, and a
// check that passed gave the transaction an id. Before 007 the database
// refused a second call by a setting, fencegate.fenced, which RESET ALL
// or set_config in dynamic SQL clears.
func TestDynamicAdvanceRefused(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	victim, _ := e.lead(t, "victim")
	vc := e.connect(t, "victim", victim)
	if _, err := vc.Exec(ctx, "SELECT 1"); err != nil { // the victim's mark is its term
		t.Fatal(err)
	}
	tok, _ := e.lead(t, "dyn")
	const maxInt64 = "9223372036854775807"
	adv := "EXECUTE 'SELECT fence' || 'gate.advance(''victim'', " + maxInt64 + ")';"
	const denied = "permission denied for function"
	for _, tc := range []struct{ name, sql, code, msg string }{
		{"after RESET ALL", "DO $$ BEGIN EXECUTE 'RESET ALL'; " + adv + " END $$", "42501", denied},
		{"after set_config", "DO $$ BEGIN EXECUTE 'SELECT set_' || 'config(''fence' || 'gate.fenced'', '''', true)'; " + adv + " END $$", "42501", denied},
		{"advance_term", "DO $$ BEGIN EXECUTE 'RESET ALL'; EXECUTE 'SELECT fence' || 'gate.advance_term(''victim'', " + maxInt64 + ", ''pg_class'', ''hashtext'')'; END $$", "42501", denied},
		{"advance_session", "DO $$ BEGIN EXECUTE 'RESET ALL'; EXECUTE 'SELECT fence' || 'gate.advance_session(''victim'', " + maxInt64 + ")'; END $$", "FG006", "only as the first statement of a transaction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.connect(t, "dyn", tok)
			// The database's own error (the client's statement failed),
			// not one of fencegate's.
			_, err := c.Exec(ctx, tc.sql)
			if code := wantCodeOf(err); code != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want SQLSTATE %s: %s", err, tc.code, tc.msg)
			}
			var mark uint64
			if err := e.admin.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = 'victim'").Scan(&mark); err != nil {
				t.Fatal(err)
			}
			if mark != victim {
				t.Fatalf("victim's mark: got %d, want %d", mark, victim)
			}
		})
	}
	// The victim's leader still writes.
	if _, err := vc.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("victim's leader after the attacks: %v", err)
	}
}

// TestTransactionSetup: BEGIN with an isolation level (pgx's BeginTx,
// asyncpg's and psycopg's transactions), SET TRANSACTION and SET
// TRANSACTION SNAPSHOT must come before the transaction's first query,
// so the fence check goes after them, in front of the first statement
// that is not one of them, in the same string or a later message. Every
// transaction is still fenced, a zombie's refused, and an error's
// position counts from the client's own SQL.
func TestTransactionSetup(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "setup")
	old, resign := e.lead(t, "setup")
	resign()
	cur, _ := e.lead(t, "setup")
	c := e.connect(t, "setup", cur)
	pc := c.PgConn()
	ins := func(v string) string {
		return "INSERT INTO setup (v) SELECT '" + v + ":' || current_setting('transaction_isolation') || ':' || " + fencedMark
	}
	for _, tc := range []struct {
		name, iso string
		run       func(v string) error
	}{
		{"BEGIN ISOLATION LEVEL, then a query", "serializable", func(v string) error {
			for _, sql := range []string{"BEGIN ISOLATION LEVEL SERIALIZABLE", ins(v), "COMMIT"} {
				if _, err := pc.Exec(ctx, sql).ReadAll(); err != nil {
					return err
				}
			}
			return nil
		}},
		{"BEGIN, SET TRANSACTION, then a query", "repeatable read", func(v string) error {
			for _, sql := range []string{"BEGIN", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", ins(v), "COMMIT"} {
				if _, err := pc.Exec(ctx, sql).ReadAll(); err != nil {
					return err
				}
			}
			return nil
		}},
		{"one string", "repeatable read", func(v string) error {
			_, err := pc.Exec(ctx, "START TRANSACTION ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION READ WRITE; "+ins(v)+"; COMMIT").ReadAll()
			return err
		}},
		{"pgx BeginTx", "serializable", func(v string) error {
			tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable, DeferrableMode: pgx.NotDeferrable})
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, ins(v)+" WHERE $1::int = 1", 1); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}},
		{"extended protocol", "serializable", func(v string) error {
			for _, sql := range []string{"BEGIN ISOLATION LEVEL SERIALIZABLE", ins(v), "COMMIT"} {
				if _, err := pc.ExecParams(ctx, sql, nil, nil, nil, nil).Close(); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		v := strings.ReplaceAll(tc.name, " ", "-")
		if err := tc.run(v); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got string
		if err := e.admin.QueryRow(ctx, "SELECT v FROM setup WHERE v LIKE $1", v+":%").Scan(&got); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if want := v + ":" + tc.iso + ":setup"; got != want {
			t.Fatalf("%s: stored %q, want %q (the isolation level, and fenced)", tc.name, got, want)
		}
	}

	// An error's position is the client's.
	_, err := pc.Exec(ctx, "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT * FROM nosuchtable").ReadAll()
	if pe := wantCode(t, err, "42P01"); pe.Position != int32(len("BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT * FROM ")+1) {
		t.Fatalf("error position: got %d, want %d", pe.Position, len("BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT * FROM ")+1)
	}
	_, _ = pc.Exec(ctx, "ROLLBACK").ReadAll()
	// A setup statement that fails: the rest, the check with it, does not run.
	_, err = pc.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT 'bogus'; "+ins("bogus")).ReadAll()
	wantCode(t, err, "22023")
	_, _ = pc.Exec(ctx, "ROLLBACK").ReadAll()

	// The zombie: its BEGIN opens a block, its first statement is refused.
	z := e.connect(t, "setup", old).PgConn()
	if _, err := z.Exec(ctx, "BEGIN ISOLATION LEVEL SERIALIZABLE").ReadAll(); err != nil {
		t.Fatal(err)
	}
	_, err = z.Exec(ctx, ins("zombie")).ReadAll()
	wantCode(t, err, "FG001")
	_, _ = z.Exec(ctx, "COMMIT").ReadAll()
	_, err = z.Exec(ctx, "BEGIN ISOLATION LEVEL SERIALIZABLE; "+ins("zombie")+"; COMMIT").ReadAll()
	wantCode(t, err, "FG001")
	_, _ = z.Exec(ctx, "ROLLBACK").ReadAll()
	_, err = z.ExecParams(ctx, "BEGIN ISOLATION LEVEL SERIALIZABLE", nil, nil, nil, nil).Close()
	if err == nil {
		_, err = z.ExecParams(ctx, ins("zombie"), nil, nil, nil, nil).Close()
	}
	wantCode(t, err, "FG001")
	_, _ = z.Exec(ctx, "ROLLBACK").ReadAll()
	if got := e.count(t, "setup"); got != 5 {
		t.Fatalf("got %d rows (%q), want the leader's 5", got, e.values(t, "setup"))
	}
	// After the block, the session's next transaction is checked again.
	if _, err := pc.Exec(ctx, ins("after")).ReadAll(); err != nil {
		t.Fatal(err)
	}
}

// TestImportedSnapshot: a transaction that imports an older snapshot
// (SET TRANSACTION SNAPSHOT, before fencegate's check) cannot make the
// check read an older mark: the check's locking read of a fence row
// changed since that snapshot fails the transaction (40001), and
// nothing is stored.
func TestImportedSnapshot(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "snap")
	tok, _ := e.lead(t, "snap")
	c := e.connect(t, "snap", tok)
	if _, err := c.Exec(ctx, "INSERT INTO snap (v) VALUES ('first')"); err != nil {
		t.Fatal(err)
	}
	// A snapshot in which the mark is tok, exported by a transaction
	// that stays open.
	exp, err := e.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Rollback(ctx)
	if _, err := exp.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	var snapshot string
	if err := exp.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&snapshot); err != nil {
		t.Fatal(err)
	}
	// The mark moves past tok where fencegate does not look (as a
	// writer through another replica would move it).
	var admin2 *pgx.Conn
	if admin2, err = pgx.Connect(ctx, pgServer.DSN()); err != nil {
		t.Fatal(err)
	}
	defer admin2.Close(ctx)
	if _, err := admin2.Exec(ctx, "SELECT fencegate.advance('snap', $1)", int64(tok)+1000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.admin.Exec(context.WithoutCancel(t.Context()), "SELECT fencegate.reset('snap', 0)"); err != nil {
			t.Error(err)
		}
	})
	_, err = c.PgConn().Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '"+snapshot+"'; INSERT INTO snap (v) VALUES ('old snapshot'); COMMIT").ReadAll()
	if code := wantCodeOf(err); code != "40001" && code != "FG001" {
		t.Fatalf("got %v, want a serialization failure (40001) or FG001", err)
	}
	t.Logf("refused: %v", err)
	_, _ = c.PgConn().Exec(ctx, "ROLLBACK").ReadAll()
	if got := e.values(t, "snap"); fmt.Sprint(got) != "[first]" {
		t.Fatalf("got rows %q, want only the first", got)
	}
}

// TestReadOnlyTransactions: read-only transactions (BEGIN READ ONLY,
// psycopg2's readonly sessions, default_transaction_read_only), where
// PostgreSQL locks no row, are checked against the mark they read
// (migration 007): the leader's reads, a new term's first reads (which
// raise no mark), and a stale token refused by the database.
func TestReadOnlyTransactions(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "ro")
	mark := func() uint64 {
		t.Helper()
		var m uint64
		if err := e.admin.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = 'ro'").Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// reads runs each read-only transaction with token, and returns the
	// first error: two blocks, and a read in a session whose every
	// transaction is read-only (default_transaction_read_only at
	// connect: a SET of it would be a read-write transaction).
	reads := func(token uint64) error {
		c := e.connect(t, "ro", token)
		for _, sql := range []string{
			"BEGIN READ ONLY; SELECT count(*) FROM ro; COMMIT",
			"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT count(*) FROM ro; COMMIT",
		} {
			for _, s := range strings.Split(sql, "; ") {
				if _, err := c.PgConn().Exec(ctx, s).ReadAll(); err != nil {
					_, _ = c.PgConn().Exec(ctx, "ROLLBACK").ReadAll()
					return fmt.Errorf("%q: %w", sql, err)
				}
			}
		}
		ro, err := pgx.Connect(ctx, e.dsn("worker", "ro", token)+"&default_transaction_read_only=on")
		if err != nil {
			return err
		}
		defer ro.Close(ctx)
		if _, err := ro.Exec(ctx, "SELECT count(*) FROM ro WHERE $1::int = 1", 1); err != nil {
			return fmt.Errorf("default_transaction_read_only: %w", err)
		}
		return nil
	}

	old, resign := e.lead(t, "ro")
	if _, err := e.connect(t, "ro", old).Exec(ctx, "INSERT INTO ro (v) VALUES ('old')"); err != nil {
		t.Fatal(err)
	}
	if err := reads(old); err != nil {
		t.Fatalf("the leader's reads: %v", err)
	}
	resign()
	cur, _ := e.lead(t, "ro")
	if err := reads(cur); err != nil {
		t.Fatalf("the new leader's first reads: %v", err)
	}
	if got := mark(); got != old {
		t.Fatalf("mark after the new term's reads: got %d, want %d (read-only transactions raise none)", got, old)
	}
	if _, err := e.connect(t, "ro", cur).Exec(ctx, "INSERT INTO ro (v) VALUES ('new')"); err != nil {
		t.Fatal(err)
	}
	if got := mark(); got != cur {
		t.Fatalf("mark after the new term's write: got %d, want %d", got, cur)
	}
	// A mark the listener has not seen (moved through another replica):
	// the database refuses the read-only transaction.
	if _, err := e.admin.Exec(ctx, "SELECT fencegate.advance('ro', $1)", int64(cur)+1000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.admin.Exec(context.WithoutCancel(t.Context()), "SELECT fencegate.reset('ro', 0)"); err != nil {
			t.Error(err)
		}
	})
	if err := reads(cur); wantCodeOf(err) != "FG001" {
		t.Fatalf("under a higher mark: got %v, want FG001", err)
	}
}

// TestLocalNameShadowsNoStatement: fencegate answers SET fencegate.token
// and SHOW fencegate.* itself as named statements, but not under the
// name of a statement the server holds: fencegate would then judge SQL
// EXECUTE of that name by its own statement, while the server runs its
// own. Here the server's is COMMIT, whose EXECUTE would end the fenced
// transaction and run the rest of the string unchecked.
func TestLocalNameShadowsNoStatement(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "shadow")
	tok, _ := e.lead(t, "shadow")
	pc := e.connect(t, "shadow", tok).PgConn()
	if _, err := pc.Prepare(ctx, "s1", "COMMIT", nil); err != nil {
		t.Fatal(err)
	}
	_, err := pc.Prepare(ctx, "s1", "SHOW fencegate.token", nil)
	wantCode(t, err, "FG006")
	_, err = pc.Exec(ctx, "INSERT INTO shadow (v) VALUES ('in'); EXECUTE s1; INSERT INTO shadow (v) SELECT 'after:' || "+fencedMark).ReadAll()
	wantCode(t, err, "FG006")
	if got := e.values(t, "shadow"); len(got) != 0 {
		t.Fatalf("got rows %q, want none", got)
	}
	// A name the server does not hold is fencegate's to answer.
	if _, err := pc.Prepare(ctx, "s2", "SHOW fencegate.token", nil); err != nil {
		t.Fatal(err)
	}
}

// TestDeferralsBounded: a block may run only so many statements that set
// it up before its check; past that they get the check in front, as any
// statement (here, PostgreSQL then refuses the late SET TRANSACTION), so
// a client repeating them holds nothing of fencegate's without end.
func TestDeferralsBounded(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "deferrals")
	for _, extended := range []bool{false, true} {
		pc := e.connect(t, "deferrals", tok).PgConn()
		run := func(sql string) error {
			if extended {
				_, err := pc.ExecParams(ctx, sql, nil, nil, nil, nil).Close()
				return err
			}
			_, err := pc.Exec(ctx, sql).ReadAll()
			return err
		}
		if err := run("BEGIN ISOLATION LEVEL SERIALIZABLE"); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < pgwire.MaxDeferrals; i++ {
			if err := run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
				t.Fatalf("extended %v: SET TRANSACTION %d: %v", extended, i, err)
			}
		}
		// Another level: PostgreSQL refuses a change after a query.
		err := run("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
		if code := wantCodeOf(err); code != "25001" {
			t.Fatalf("extended %v: SET TRANSACTION past the bound: got %v, want 25001 (the check ran first)", extended, err)
		}
		if _, err := pc.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
			t.Fatal(err)
		}
		if err := run("SELECT 1"); err != nil {
			t.Fatalf("after the block: %v", err)
		}
	}
}
