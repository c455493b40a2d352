package pgwire_test

// Attacks on the listener's fencing found by a red-team review: each test
// asserts the safe outcome (nothing written outside a fenced transaction,
// no zombie row after the next leader's). The fixes: a FunctionCall ends
// the segment as a Query does (session.functionCall); a DO or CALL, or a
// backslash, in a Query sent before a Sync is refused, and so is a
// backslash while standard_conforming_strings is off or client_encoding is
// a client-only one (session.lexicalRefusal).

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// fencedMarkQ is fencedMark without single quotes, for SQL that must look
// like the inside of a string literal to fencegate's parser.
const fencedMarkQ = "coalesce(nullif(current_setting($m$fencegate.fenced$m$, true), $m$$m$), $m$UNFENCED$m$)"

// rawConn is a client that speaks the protocol by hand, past startup.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	fe   *pgproto3.Frontend
}

func (e *env) raw(t *testing.T, fence string, token uint64) *rawConn {
	t.Helper()
	return e.rawWith(t, fence, token, "")
}

// rawWith is raw with more connection parameters (&name=value...).
func (e *env) rawWith(t *testing.T, fence string, token uint64, extra string) *rawConn {
	t.Helper()
	c := e.connectWith(t, fence, token, extra)
	hc, err := c.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return &rawConn{t: t, conn: hc.Conn, fe: hc.Frontend}
}

func (r *rawConn) send(msgs ...pgproto3.FrontendMessage) {
	r.t.Helper()
	for _, m := range msgs {
		r.fe.Send(m)
	}
	if err := r.fe.Flush(); err != nil {
		r.t.Fatal(err)
	}
}

// results reads up to n ReadyForQuery messages and returns the errors
// (SQLSTATE: message) seen and the last transaction status; err is set if
// the connection failed first.
func (r *rawConn) results(n int) (errs []string, status byte, err error) {
	_ = r.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer func() { _ = r.conn.SetReadDeadline(time.Time{}) }()
	for n > 0 {
		m, rerr := r.fe.Receive()
		if rerr != nil {
			return errs, status, rerr
		}
		switch m := m.(type) {
		case *pgproto3.ErrorResponse:
			errs = append(errs, m.Code+": "+m.Message)
		case *pgproto3.ReadyForQuery:
			status = m.TxStatus
			n--
		}
	}
	return errs, status, nil
}

func (r *rawConn) query(sql string) ([]string, byte) {
	r.t.Helper()
	r.send(&pgproto3.Query{String: sql})
	errs, st, err := r.results(1)
	if err != nil {
		r.t.Fatalf("%.60q: %v (errors %q)", sql, err, errs)
	}
	return errs, st
}

// ext is Parse, Bind and Execute of sql as the unnamed statement and portal.
func ext(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
}

func msgs(parts ...any) []pgproto3.FrontendMessage {
	var out []pgproto3.FrontendMessage
	for _, p := range parts {
		switch p := p.(type) {
		case pgproto3.FrontendMessage:
			out = append(out, p)
		case []pgproto3.FrontendMessage:
			out = append(out, p...)
		}
	}
	return out
}

// noUnfenced fails if any row of table was written outside a fenced
// transaction (its value ends with UNFENCED) or has one of the prefixes.
func (e *env) noRows(t *testing.T, table string, bad ...string) {
	t.Helper()
	for _, v := range e.values(t, table) {
		if strings.HasSuffix(v, "UNFENCED") {
			t.Errorf("HOLE: row %q of %s was written outside a fenced transaction (all rows: %q)", v, table, e.values(t, table))
		}
		for _, b := range bad {
			if strings.HasPrefix(v, b) {
				t.Errorf("HOLE: row %q of %s landed (all rows: %q)", v, table, e.values(t, table))
			}
		}
	}
}

// newTerm ends the zombie's term and has the next leader write a row
// through the listener (raising the fence's mark), returning its token.
func (e *env) newTerm(t *testing.T, fence, table string, resign func()) uint64 {
	t.Helper()
	resign()
	cur, _ := e.lead(t, fence)
	l := e.connect(t, fence, cur)
	if _, err := l.Exec(t.Context(), "INSERT INTO "+table+" (v) VALUES ($1)", "leader"); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	return cur
}

// waitDO is a DO block, without single quotes, that waits (catching the
// cancel fencegate sends when it ends a transaction of an ended term) until
// fence's mark is above old and a second more has passed, then inserts a
// row into table. In a transaction that is not fenced, that row is written
// after the next leader's.
func waitDO(fence, table string, old uint64) string {
	return fmt.Sprintf(`DO $d$
DECLARE m bigint; seen int := 0; i int := 0;
BEGIN
  LOOP
    i := i + 1;
    BEGIN
      PERFORM pg_sleep(0.05);
      SELECT token INTO m FROM fencegate.fences WHERE name = $n$%s$n$;
      IF m > %d THEN seen := seen + 1; END IF;
    EXCEPTION WHEN query_canceled THEN NULL;
    END;
    EXIT WHEN seen > 20 OR i > 400;
  END LOOP;
  INSERT INTO %s (v) VALUES ($z$zombie:$z$ || %s);
END $d$`, fence, old, table, fencedMarkQ)
}

// eventually waits up to 5 s for f to be true: a zombie's row lands about
// a second after the next leader's (waitDO) when the attack works.
func eventually(f func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}

func (e *env) has(t *testing.T, table, prefix string) bool {
	t.Helper()
	for _, v := range e.values(t, table) {
		if strings.HasPrefix(v, prefix) {
			return true
		}
	}
	return false
}

// TestSmuggleFunctionCallEndsSegment: a FunctionCall ('F') sent in the
// middle of an extended-protocol segment, after the fence check, is
// refused with a Query the server fails, which ends the segment's implicit
// transaction on the server as a FunctionCall or Query would. What follows
// it before the Sync runs in a new transaction, which must get a check of
// its own: a write there is fenced, and a block opened there is one the
// end of the term ends.
func TestSmuggleFunctionCallEndsSegment(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_fc")
	old, resign := e.lead(t, "rt-fc")
	z := e.raw(t, "rt-fc", old)

	// 1. A write after the F, in the same segment: refused F, fenced write.
	z.send(msgs(ext("SELECT 1"), &pgproto3.FunctionCall{Function: 1}, ext("INSERT INTO rt_fc (v) SELECT 'after-F:' || "+fencedMark), &pgproto3.Sync{})...)
	errs, st, err := z.results(2)
	if err != nil || len(errs) != 1 || !strings.HasPrefix(errs[0], "FG006") || st != 'I' {
		t.Errorf("F then INSERT: got errors %q, status %q, %v; want the F refused (FG006), then the INSERT", errs, st, err)
	}
	if got := e.values(t, "rt_fc"); len(got) != 1 || got[0] != "after-F:rt-fc" {
		t.Errorf("rows %q, want [after-F:rt-fc]: the write after the F fenced", got)
	}

	// 2. A block opened after the F, written in after the term ended.
	z.send(msgs(ext("SELECT 1"), &pgproto3.FunctionCall{Function: 1}, ext("BEGIN"), &pgproto3.Sync{})...)
	if _, st, err = z.results(2); err != nil || st != 'T' {
		t.Fatalf("F then BEGIN: status %q, %v; want a block", st, err)
	}
	e.newTerm(t, "rt-fc", "rt_fc", resign)
	// The block's check ran at its BEGIN, so the end of the term ends it:
	// fencegate closes the connection (or refuses what follows).
	z.send(&pgproto3.Query{String: "INSERT INTO rt_fc (v) SELECT 'zombie:' || " + fencedMark + "; COMMIT"})
	errs, _, err = z.results(1)
	if err == nil && len(errs) == 0 {
		t.Errorf("the zombie's INSERT and COMMIT after the end of its term: no error")
	}
	e.noRows(t, "rt_fc", "zombie")
}

// TestSmuggleProcInBatchQuery: a simple Query of DO (or CALL) sent in
// the middle of an extended-protocol segment, after the check, gets no
// check of its own, so it is a single statement: PostgreSQL runs it
// non-atomic, and a COMMIT inside ends the fenced transaction and runs the
// rest without a check.
func TestSmuggleProcInBatchQuery(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_do")
	old, resign := e.lead(t, "rt-do")
	z := e.raw(t, "rt-do", old)
	do := "DO $$ BEGIN INSERT INTO rt_do (v) VALUES ('do-1:' || " + fencedMark + "); COMMIT; INSERT INTO rt_do (v) VALUES ('do-2:' || " + fencedMark + "); END $$"
	z.send(msgs(ext("SELECT 1"), &pgproto3.Query{String: do}, &pgproto3.Sync{})...)
	errs, st, err := z.results(2)
	t.Logf("DO mid-segment: errors %q, status %q, err %v; rows %q", errs, st, err, e.values(t, "rt_do"))
	e.noRows(t, "rt_do")

	// The same with CALL of a procedure that commits.
	for _, sql := range []string{
		"CREATE OR REPLACE PROCEDURE rt_commit_inside() LANGUAGE plpgsql AS $$ BEGIN INSERT INTO rt_do (v) VALUES ('call-1:' || " + fencedMark + "); COMMIT; INSERT INTO rt_do (v) VALUES ('call-2:' || " + fencedMark + "); END $$",
		"GRANT EXECUTE ON PROCEDURE rt_commit_inside() TO worker",
	} {
		if _, err := e.admin.Exec(t.Context(), sql); err != nil {
			t.Fatal(err)
		}
	}
	z.send(msgs(ext("SELECT 1"), &pgproto3.Query{String: "CALL rt_commit_inside()"}, &pgproto3.Sync{})...)
	errs, st, err = z.results(2)
	t.Logf("CALL mid-segment: errors %q, status %q, err %v; rows %q", errs, st, err, e.values(t, "rt_do"))
	e.noRows(t, "rt_do")

	// The zombie: the DO commits its fenced part, waits out the end of its
	// term (and fencegate's cancel), then writes after the next leader.
	z2 := e.raw(t, "rt-do", old)
	z2.send(msgs(ext("SELECT 1"), &pgproto3.Query{String: strings.Replace(waitDO("rt-do", "rt_do", old), "BEGIN\n  LOOP", "BEGIN\n  COMMIT;\n  LOOP", 1)}, &pgproto3.Sync{})...)
	time.Sleep(500 * time.Millisecond) // the DO is past its COMMIT
	e.newTerm(t, "rt-do", "rt_do", resign)
	if eventually(func() bool { return e.has(t, "rt_do", "zombie") }) {
		t.Errorf("HOLE: the zombie's row landed after the next leader's: %q", e.values(t, "rt_do"))
	}
}

// TestSmuggleStandardConformingStringsOff: with standard_conforming_strings
// off, the server reads 'a\” as a complete literal while fencegate's
// parser (always on) reads a literal that runs to the last quote; a
// COMMIT hidden there ends the fenced transaction and the rest of the
// string runs without a check.
func TestSmuggleStandardConformingStringsOff(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_scs")
	old, resign := e.lead(t, "rt-scs")
	z := e.raw(t, "rt-scs", old)
	if errs, _ := z.query("SET standard_conforming_strings = off"); len(errs) > 0 {
		t.Fatalf("SET: %q", errs)
	}
	errs, st := z.query(`SELECT 'a\''; COMMIT; INSERT INTO rt_scs (v) SELECT $s$smuggled:$s$ || ` + fencedMarkQ + `; --'`)
	t.Logf("smuggled COMMIT: errors %q, status %q; rows %q", errs, st, e.values(t, "rt_scs"))
	e.noRows(t, "rt_scs")
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "FG006") || !strings.Contains(errs[0], "standard_conforming_strings is off") {
		t.Errorf("got errors %q, want FG006 naming standard_conforming_strings", errs)
	}
	// A text fencegate cannot parse is refused for the setting, which is
	// the reason, not for its parse (psql sends SELECT 'a\''; alone).
	if errs, _ := z.query(`SELECT 'a\'';`); len(errs) != 1 || !strings.Contains(errs[0], "standard_conforming_strings is off") {
		t.Errorf("SELECT 'a\\'' with standard_conforming_strings off: got errors %q, want the setting named", errs)
	}
	// Without a backslash the two readings agree: the session works.
	if errs, _ := z.query("INSERT INTO rt_scs (v) SELECT 'plain:' || " + fencedMark); len(errs) > 0 {
		t.Errorf("a write without a backslash: %q", errs)
	}
	// With the setting back on, a backslash reads the same to both.
	if errs, _ := z.query("SET standard_conforming_strings = on"); len(errs) > 0 {
		t.Fatalf("SET: %q", errs)
	}
	if errs, _ := z.query(`INSERT INTO rt_scs (v) SELECT 'back\slash:' || ` + fencedMark); len(errs) > 0 {
		t.Errorf("a backslash with standard_conforming_strings on: %q", errs)
	}
	if got := e.values(t, "rt_scs"); len(got) != 2 || got[0] != "plain:rt-scs" || got[1] != `back\slash:rt-scs` {
		t.Errorf("rows %q, want [plain:rt-scs back\\slash:rt-scs]", got)
	}

	// The setting changed by a function, and the smuggling query sent in
	// the same write, before any answer: fencegate reads the second only
	// after the server answered the first, ParameterStatus included.
	zp := e.raw(t, "rt-scs", old)
	zp.send(&pgproto3.Query{String: "SELECT set_config('standard_conforming_strings', 'off', false)"},
		&pgproto3.Query{String: `SELECT 'a\''; COMMIT; INSERT INTO rt_scs (v) SELECT $s$pipelined:$s$ || ` + fencedMarkQ + `; --'`})
	if errs, _, err := zp.results(2); err != nil || len(errs) != 1 || !strings.Contains(errs[0], "standard_conforming_strings is off") {
		t.Errorf("set_config then the smuggling query in one write: got errors %q, %v; want the second refused naming the setting", errs, err)
	}
	e.noRows(t, "rt_scs", "pipelined")

	// The zombie: after the hidden COMMIT, a wait for the next term and a
	// write after it, in one string.
	z2 := e.raw(t, "rt-scs", old)
	if errs, _ := z2.query("SET standard_conforming_strings = off"); len(errs) > 0 {
		t.Fatalf("SET: %q", errs)
	}
	z2.send(&pgproto3.Query{String: `SELECT 'a\''; COMMIT; ` + waitDO("rt-scs", "rt_scs", old) + `; --'`})
	time.Sleep(500 * time.Millisecond)
	e.newTerm(t, "rt-scs", "rt_scs", resign)
	if eventually(func() bool { return e.has(t, "rt_scs", "zombie") }) {
		t.Errorf("HOLE: the zombie's row landed after the next leader's: %q", e.values(t, "rt_scs"))
	}
}

// TestSmuggleClientOnlyEncoding: with client_encoding SJIS, the bytes C3 95 5C
// are, to the server, a half-width katakana and a two-byte character whose
// second byte is 0x5C; to fencegate's parser (UTF-8) they are Õ and a
// backslash, which escapes the quote after it in an E” literal. A COMMIT
// hidden in what fencegate takes for that literal ends the fenced
// transaction. No setting but the client encoding is needed.
func TestSmuggleClientOnlyEncoding(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_sjis")
	tok, _ := e.lead(t, "rt-sjis")
	// The server reports an encoding by its canonical name, whatever the
	// client called it (WIN932 is SJIS; options= sets it at the start).
	for _, set := range []string{"SET client_encoding = 'SJIS'", "SET NAMES 'win932'", "SET client_encoding = 'big5'", "client_encoding=sjis at the start"} {
		t.Run(set, func(t *testing.T) {
			var z *rawConn
			if strings.HasSuffix(set, "at the start") {
				z = e.rawWith(t, "rt-sjis", tok, "&client_encoding=sjis")
			} else {
				z = e.raw(t, "rt-sjis", tok)
				if errs, _ := z.query(set); len(errs) > 0 {
					t.Fatalf("%s: %q", set, errs)
				}
			}
			errs, st := z.query("SELECT E'\xc3\x95\\'; COMMIT; INSERT INTO rt_sjis (v) SELECT $s$smuggled:$s$ || " + fencedMarkQ + "; --'")
			t.Logf("smuggled COMMIT: errors %q, status %q; rows %q", errs, st, e.values(t, "rt_sjis"))
			e.noRows(t, "rt_sjis")
			if len(errs) != 1 || !strings.HasPrefix(errs[0], "FG006") || !strings.Contains(errs[0], "client_encoding") {
				t.Errorf("got errors %q, want FG006 naming client_encoding", errs)
			}
			if errs, _ := z.query("SET client_encoding = 'UTF8'"); len(errs) > 0 {
				t.Fatalf("SET UTF8: %q", errs)
			}
			if errs, _ := z.query(`INSERT INTO rt_sjis (v) SELECT E'utf8\\:' || ` + fencedMark); len(errs) > 0 {
				t.Errorf("a backslash with client_encoding UTF8: %q", errs)
			}
		})
	}
}

// TestSmuggleVacuumInPipeline: VACUUM commits the transaction it starts
// in and starts a new one when it ends; after the check in an
// extended-protocol segment, what follows it would run unfenced unless
// the server refuses VACUUM in a pipeline.
func TestSmuggleVacuumInPipeline(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_vac")
	tok, _ := e.lead(t, "rt-vac")
	z := e.raw(t, "rt-vac", tok)
	z.send(msgs(ext("SELECT 1"), ext("VACUUM"), ext("INSERT INTO rt_vac (v) SELECT 'after-vacuum:' || "+fencedMark), &pgproto3.Sync{})...)
	errs, st, err := z.results(1)
	t.Logf("VACUUM in a pipeline: errors %q, status %q, err %v; rows %q", errs, st, err, e.values(t, "rt_vac"))
	e.noRows(t, "rt_vac")
}

// TestSmuggleStale: a zombie's stale token is refused, and nothing
// is written, whatever shape its transaction takes.
func TestSmuggleStale(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_stale")
	old, resign := e.lead(t, "rt-stale")
	e.newTerm(t, "rt-stale", "rt_stale", resign)
	ins := "INSERT INTO rt_stale (v) SELECT 'zombie:' || " + fencedMark
	for _, tc := range []struct {
		name string
		send []pgproto3.FrontendMessage
		rfqs int
	}{
		{"simple", msgs(&pgproto3.Query{String: ins}), 1},
		{"simple block", msgs(&pgproto3.Query{String: "BEGIN; " + ins + "; COMMIT"}), 1},
		{"deferred BEGIN, SAVEPOINT, ROLLBACK TO", msgs(&pgproto3.Query{String: "BEGIN ISOLATION LEVEL SERIALIZABLE"},
			&pgproto3.Query{String: "SAVEPOINT a"}, &pgproto3.Query{String: "ROLLBACK TO SAVEPOINT a"},
			&pgproto3.Query{String: ins}, &pgproto3.Query{String: "COMMIT"}), 5},
		{"pipelined segments", msgs(ext(ins), &pgproto3.Sync{}, ext(ins), &pgproto3.Sync{}, ext("COMMIT"), ext(ins), &pgproto3.Sync{}), 3},
		{"Flush between", msgs(&pgproto3.Parse{Query: ins}, &pgproto3.Flush{}, &pgproto3.Bind{}, &pgproto3.Flush{}, &pgproto3.Execute{}, &pgproto3.Sync{}), 1},
		{"F then more", msgs(ext("SELECT 1"), &pgproto3.FunctionCall{Function: 1}, ext(ins), &pgproto3.Sync{}), 1},
		{"Query mid-segment", msgs(&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Query{String: ins}, &pgproto3.Sync{}), 2},
		{"COPY FROM STDIN", msgs(&pgproto3.Query{String: "COPY rt_stale (v) FROM STDIN"}, &pgproto3.CopyData{Data: []byte("zombie-copy\n")}, &pgproto3.CopyDone{}), 1},
		{"CopyData after CopyFail", msgs(&pgproto3.Query{String: "COPY rt_stale (v) FROM STDIN"}, &pgproto3.CopyFail{Message: "x"}, &pgproto3.CopyData{Data: []byte("zombie-copy2\n")}, &pgproto3.CopyDone{}), 1},
		{"SET token lower then higher", msgs(&pgproto3.Query{String: fmt.Sprintf("SET fencegate.token = %d", old-1)}, &pgproto3.Query{String: ins}), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := e.raw(t, "rt-stale", old)
			z.send(tc.send...)
			errs, st, err := z.results(tc.rfqs)
			t.Logf("errors %q, status %q, err %v", errs, st, err)
			if st == 'T' || st == 'E' {
				z.send(&pgproto3.Query{String: "ROLLBACK"})
				_, _, _ = z.results(1)
			}
			e.noRows(t, "rt_stale", "zombie")
			ok := false
			for _, er := range errs {
				ok = ok || strings.HasPrefix(er, "FG001") || strings.HasPrefix(er, "FG006")
			}
			if !ok {
				t.Errorf("got errors %q, want a refusal", errs)
			}
		})
	}
	_ = ctx
}

// TestSmuggleCurrent: with the current token, things that might end
// the fenced transaction, undo its check or run later outside it are
// refused or stay fenced.
func TestSmuggleCurrent(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_cur")
	tok, resign := e.lead(t, "rt-cur")
	for _, sql := range []string{
		"CREATE OR REPLACE FUNCTION rt_writer(i int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN INSERT INTO rt_cur (v) VALUES ('cursor' || i || ':' || " + fencedMark + "); RETURN i; END $$",
		"GRANT EXECUTE ON FUNCTION rt_writer(int) TO worker",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		sqls []string
	}{
		{"savepoint rollback keeps the check", []string{"BEGIN", "SAVEPOINT a", "INSERT INTO rt_cur (v) SELECT 'sp1:' || " + fencedMark, "ROLLBACK TO SAVEPOINT a", "RELEASE SAVEPOINT a", "INSERT INTO rt_cur (v) SELECT 'sp2:' || " + fencedMark, "COMMIT"}},
		{"savepoint in one string", []string{"BEGIN ISOLATION LEVEL READ COMMITTED; SAVEPOINT a; SELECT 1; ROLLBACK TO a; INSERT INTO rt_cur (v) SELECT 'sp3:' || " + fencedMark + "; COMMIT"}},
		{"EXPLAIN ANALYZE EXECUTE of a prepared COMMIT", []string{"EXPLAIN ANALYZE EXECUTE rt_commit; INSERT INTO rt_cur (v) SELECT 'explain:' || " + fencedMark}},
		{"PREPARE TRANSACTION", []string{"BEGIN", "INSERT INTO rt_cur (v) SELECT 'prepared:' || " + fencedMark, "PREPARE TRANSACTION 'rt'"}},
		{"session_replication_role", []string{"SET session_replication_role = replica"}},
		{"SET ROLE fencegate_owner", []string{"SET ROLE fencegate_owner"}},
		{"SET SESSION AUTHORIZATION", []string{"SET SESSION AUTHORIZATION postgres"}},
		{"ALTER ROLE SET fencegate.fenced", []string{"ALTER ROLE worker SET fencegate.fenced = 'x'"}},
		{"LISTEN NOTIFY", []string{"LISTEN rt", "NOTIFY rt, 'x'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.connect(t, "rt-cur", tok)
			if _, err := c.PgConn().Prepare(ctx, "rt_commit", "COMMIT", nil); err != nil {
				t.Fatal(err)
			}
			for _, sql := range tc.sqls {
				_, err := c.PgConn().Exec(ctx, sql).ReadAll()
				t.Logf("%.70s: %v", sql, err)
			}
			_, _ = c.PgConn().Exec(ctx, "ROLLBACK").ReadAll()
			e.noRows(t, "rt_cur")
		})
	}
	// A cursor WITH HOLD over a function that writes: it runs at COMMIT,
	// in the fenced transaction; a FETCH after the term ended writes
	// nothing.
	c := e.connect(t, "rt-cur", tok)
	for _, sql := range []string{"BEGIN", "DECLARE rtc CURSOR WITH HOLD FOR SELECT rt_writer(i) FROM generate_series(1, 3) i", "COMMIT"} {
		if _, err := c.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	before := len(e.values(t, "rt_cur"))
	e.newTerm(t, "rt-cur", "rt_cur", resign)
	_, err := c.PgConn().Exec(ctx, "FETCH ALL FROM rtc").ReadAll()
	t.Logf("FETCH after the term: %v", err)
	if got := e.values(t, "rt_cur"); len(got) != before+1 {
		t.Errorf("rows %q: the FETCH wrote", got)
	}
	e.noRows(t, "rt_cur")
	// A named portal bound in a committed block is gone.
	z := e.raw(t, "rt-cur", tok)
	z.send(&pgproto3.Query{String: "BEGIN"})
	_, _, _ = z.results(1)
	z.send(&pgproto3.Parse{Name: "rtp", Query: "INSERT INTO rt_cur (v) SELECT 'portal:' || " + fencedMark}, &pgproto3.Bind{DestinationPortal: "rtp", PreparedStatement: "rtp"}, &pgproto3.Sync{})
	_, _, _ = z.results(1)
	z.send(&pgproto3.Query{String: "COMMIT"})
	_, _, _ = z.results(1)
	z.send(&pgproto3.Execute{Portal: "rtp"}, &pgproto3.Sync{})
	errs, _, err := z.results(1)
	t.Logf("portal after COMMIT: %q %v", errs, err)
	e.noRows(t, "rt_cur", "portal")
}

// TestSmuggleStartup: startup parameters that would leave transactions
// unfenced are refused.
func TestSmuggleStartup(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt-start")
	for _, extra := range []string{
		"&replication=database",
		"&replication=t",
		"&replication=yes",
		"&options=-c%20fencegate.fenced%3Dx",
		"&options=--fencegate.fenced%3Dx",
		"&options=-c%5C%20fencegate.fenced%3Dx", // -c\ fencegate.fenced=x
		"&options=-c%20session_replication_role%3Dreplica",
		"&options=-c%20role%3Dfencegate_owner",
		"&FENCEGATE.FENCED=x",
	} {
		c, err := pgx.Connect(ctx, e.dsn("worker", "rt-start", tok)+extra)
		if err == nil {
			var fenced string
			qerr := c.QueryRow(ctx, "SELECT "+fencedMark).Scan(&fenced)
			t.Logf("%s: connected; a read: %q %v", extra, fenced, qerr)
			if qerr == nil && fenced != "rt-start" {
				t.Errorf("%s: a read ran unfenced (%q)", extra, fenced)
			}
			c.Close(ctx)
			continue
		}
		t.Logf("%s: refused: %v", extra, err)
	}
}

// TestSmuggleCancelTrap: fencegate ends a transaction whose term
// ended by closing the server connection and cancelling its statement; a
// statement that traps query_canceled would keep running, holding the
// fence's row, and the next leader's first write would wait for it (found
// by a review on 2026-11-28). fencegate also terminates the backend of a
// session that ended mid-statement (migration 009's end_session), so the
// next leader writes at once and the zombie's transaction rolls back.
func TestSmuggleCancelTrap(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_trap")
	old, resign := e.lead(t, "rt-trap")
	z := e.raw(t, "rt-trap", old)
	if errs, _ := z.query("BEGIN; INSERT INTO rt_trap (v) VALUES ('zombie-in-block')"); len(errs) > 0 {
		t.Fatal(errs)
	}
	// About 30 s, whatever cancels it meanwhile.
	const trap = "DO $$ DECLARE i int := 0; BEGIN LOOP i := i + 1; BEGIN PERFORM pg_sleep(0.05); " +
		"EXCEPTION WHEN query_canceled THEN NULL; END; EXIT WHEN i > 600; END LOOP; END $$"
	z.send(&pgproto3.Query{String: trap})
	running := e.running(t, trap)
	if !eventually(running) {
		t.Fatal("the trap never ran")
	}
	resign()
	cur, _ := e.lead(t, "rt-trap")
	l := e.connect(t, "rt-trap", cur)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := l.Exec(wctx, "INSERT INTO rt_trap (v) VALUES ($1)", "leader"); err != nil {
		t.Fatalf("the next leader's first write, after %v: %v (the trap still running: %v)", time.Since(start).Round(time.Millisecond), err, running())
	}
	t.Logf("the next leader's write took %v", time.Since(start).Round(time.Millisecond))
	if running() {
		t.Error("the trap still runs after the next leader wrote")
	}
	e.noRows(t, "rt_trap", "zombie")
}

// TestSmuggleCancelTrapClientGone: a client that leaves while its
// statement runs (and traps the cancel) leaves nothing running either:
// its backend is terminated, and what its transaction wrote rolls back.
func TestSmuggleCancelTrapClientGone(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt_gone")
	tok, _ := e.lead(t, "rt-gone")
	z := e.raw(t, "rt-gone", tok)
	const trap = "DO $$ DECLARE i int := 0; BEGIN INSERT INTO rt_gone (v) VALUES ('left-behind'); " +
		"LOOP i := i + 1; BEGIN PERFORM pg_sleep(0.05); " +
		"EXCEPTION WHEN query_canceled THEN NULL; END; EXIT WHEN i > 601; END LOOP; END $$"
	z.send(&pgproto3.Query{String: trap})
	running := e.running(t, trap)
	if !eventually(running) {
		t.Fatal("the trap never ran")
	}
	z.conn.Close()
	if !eventually(func() bool { return !running() }) {
		t.Fatal("the statement of a client that left runs on")
	}
	if got := e.values(t, "rt_gone"); len(got) != 0 {
		t.Errorf("rows of the client that left: %q, want none", got)
	}
}

// running reports whether a statement whose text ends with sql is active
// on the database (a text fencegate prefixed with its check ends so too).
func (e *env) running(t *testing.T, sql string) func() bool {
	t.Helper()
	return func() bool {
		var n int
		if err := e.admin.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE right(query, length($1)) = $1 AND state = 'active'", sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
}

// connectWith is connect with more connection parameters (&name=value...).
func (e *env) connectWith(t *testing.T, fence string, token uint64, extra string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), e.dsn("worker", fence, token)+extra)
	if err != nil {
		t.Fatalf("connect through fencegate: %v", err)
	}
	t.Cleanup(func() { c.Close(context.WithoutCancel(t.Context())) })
	return c
}
