package postgres

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// TestPrepareFenced: a caller's statement is parsed only inside a
// transaction that passed its write's fence check, as its role, and that
// transaction rolls back: what the parse ran is undone, a write refused at
// its statement's prepare leaves the mark where it was, and the
// connection is left idle, with no role, ready for the next write.
func TestPrepareFenced(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table, fn, dom := unique("pf"), unique("pf_w"), unique("pf_d")
	mustExec(t, db, "CREATE TABLE "+table+"(v text)")
	mustExec(t, db, "GRANT INSERT, SELECT ON "+table+" TO PUBLIC")
	mustExec(t, db, "CREATE FUNCTION "+fn+"(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN "+
		"INSERT INTO "+table+" VALUES ('parse as ' || current_user); RETURN true; END $$")
	mustExec(t, db, "CREATE DOMAIN "+dom+" AS int CHECK ("+fn+"(VALUE))")
	b := openBackend(t, Config{MaxConns: 1})
	fence := unique("pf")

	// A current token: the parse runs (fenced), its insert is rolled back
	// with the prepare, and the statement, prepared, runs in the write.
	literal := Statement{SQL: "SELECT '{1}'::" + dom + "[] AS a"}
	if _, err := b.Exec(t.Context(), fence, 3, []Statement{literal}); err != nil {
		t.Fatalf("write with a current token: %v", err)
	}
	if n := count(t, db, table); n != 0 {
		t.Errorf("rows after the prepare of a literal whose domain's CHECK inserts: got %d, want 0 (rolled back with the prepare)", n)
	}
	// Prepared now: the next write sends no Parse, and runs nothing more.
	if _, err := b.Exec(t.Context(), fence, 3, []Statement{literal}); err != nil {
		t.Fatalf("second write: %v", err)
	}
	if n := count(t, db, table); n != 0 {
		t.Errorf("rows after the second write: got %d, want 0", n)
	}

	// A higher token whose write fails at its statement's prepare leaves
	// the mark where it was: the check's raise rolled back.
	_, err := b.Exec(t.Context(), fence, 7, []Statement{{SQL: "INSERT INTO " + unique("pf_missing") + " VALUES (1)"}})
	r := refusal(t, err, tokens.ReasonStatementFailed)
	if r.Metadata["statement"] != "0" || r.Metadata["sqlstate"] != "42P01" {
		t.Errorf("refusal metadata: got %v, want statement 0, sqlstate 42P01", r.Metadata)
	}
	if got := highWater(t, fence); got != 3 {
		t.Errorf("mark after a write refused at its prepare: got %d, want 3", got)
	}

	// A stale token on a statement the connection has not seen: refused as
	// the write would be, with the mark, and nothing parsed.
	_, err = b.Exec(t.Context(), fence, 2, []Statement{{SQL: "SELECT '{2}'::" + dom + "[] AS b"}})
	r = refusal(t, err, tokens.ReasonStaleToken)
	if r.HighWater != 3 {
		t.Errorf("stale refusal's high-water: got %d, want 3", r.HighWater)
	}
	if n := count(t, db, table); n != 0 {
		t.Errorf("rows after a stale write's prepare: got %d, want 0", n)
	}

	// The connection is clean: idle, no role, nothing left of the prepare.
	res, err := b.Exec(t.Context(), fence, 3, []Statement{{SQL: "SELECT current_user::text AS u, pg_catalog.current_setting('role') AS r"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Rows[0]; got[1] != "none" {
		t.Errorf("role on the connection after the prepares: got %v, want none", got)
	}
}

// TestPrepareRoleRefusal: a write as a role fencegate may not become, on a
// statement the connection has not prepared, is refused as the write path
// refuses it (STATEMENT_FAILED, metadata role), and the statement is not
// parsed as fencegate's login.
func TestPrepareRoleRefusal(t *testing.T) {
	t.Parallel()
	w := newWriters(t)
	b := w.open(t, Config{MaxConns: 1})
	stranger := unique("stranger")
	mustExec(t, w.db, "CREATE ROLE "+stranger+" NOLOGIN")
	_, err := b.ExecAs(t.Context(), unique("pf_role"), 1, stranger, []Statement{w.insert(w.at)})
	r := refusal(t, err, tokens.ReasonStatementFailed)
	if r.Metadata["role"] != stranger || r.Metadata["sqlstate"] != "42501" {
		t.Errorf("refusal metadata: got %v, want role %s, sqlstate 42501", r.Metadata, stranger)
	}
	// The same statement as a role it may become runs.
	if _, err := b.ExecAs(t.Context(), unique("pf_role"), 1, w.aw, []Statement{w.insert(w.at)}); err != nil {
		t.Fatal(err)
	}
}

// TestPrepareBatch: writes coalesced in one batch, each with statements
// the connection has not prepared, some of them shared. A stale write, and
// one whose statement fails to parse, are refused alone; the writes that
// share their statements still prepare them, under their own checks.
func TestPrepareBatch(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	db := admin(t)
	table, stale := unique("pfb"), unique("pfb_stale")
	mustExec(t, db, "CREATE TABLE "+table+"(n int)")
	if _, err := b.Exec(t.Context(), stale, 10, []Statement{{SQL: "SELECT 1"}}); err != nil {
		t.Fatal(err)
	}
	insert := Statement{SQL: "INSERT INTO " + table + " VALUES ($1)", Params: []any{1.0}}
	other := Statement{SQL: "INSERT INTO " + table + " SELECT $1::int + 0", Params: []any{1.0}}
	missing := Statement{SQL: "INSERT INTO " + unique("pfb_missing") + " VALUES (1)"}
	type write struct {
		fence string
		token tokens.Token
		stmts []Statement
		want  tokens.Reason
	}
	writes := []write{
		{stale, 9, []Statement{insert, other}, tokens.ReasonStaleToken},
		{unique("pfb"), 1, []Statement{insert}, ""},
		{unique("pfb"), 1, []Statement{missing, insert}, tokens.ReasonStatementFailed},
		{unique("pfb"), 1, []Statement{missing}, tokens.ReasonStatementFailed},
		{unique("pfb"), 1, []Statement{other, insert}, ""},
	}
	busy := occupy(t, b, 1, 300*time.Millisecond)
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() { _, errs[i] = b.Exec(t.Context(), w.fence, w.token, w.stmts) })
		time.Sleep(10 * time.Millisecond) // queued in this order
	}
	busy.Wait()
	wg.Wait()
	for i, w := range writes {
		if w.want == "" {
			if errs[i] != nil {
				t.Errorf("write %d: got %v, want accepted", i, errs[i])
			}
			continue
		}
		if r, ok := tokens.AsRefusal(errs[i]); !ok || r.Reason != w.want {
			t.Errorf("write %d: got %v, want %s", i, errs[i], w.want)
		}
	}
	if n := count(t, db, table); n != 3 {
		t.Errorf("rows: got %d, want 3 (writes 1 and 4)", n)
	}
	if got := highWater(t, stale); got != 10 {
		t.Errorf("stale fence's mark: got %d, want 10", got)
	}
}

// TestMessageLimit: a message from the server over maxMessageLen ends the
// connection without being read. An error is the write's refusal
// (STATEMENT_FAILED, rolled back); a notice may come before a commit, so
// the write's outcome is unknown. Rows within MaxResultBytes pass, and
// the next write gets a new connection.
func TestMessageLimit(t *testing.T) {
	t.Parallel()
	// A login whose errors the server does not log: the test server's
	// log reader would read a line of megabytes.
	login := unique("ml_quiet")
	dsn, err := server.RuntimeRole(t.Context(), login)
	if err != nil {
		t.Fatal(err)
	}
	db := admin(t)
	mustExec(t, db, "ALTER ROLE "+login+" SET log_min_messages = panic")
	mustExec(t, db, "ALTER ROLE "+login+" SET log_min_error_statement = panic")
	table, notice := unique("ml"), unique("ml_notice")
	mustExec(t, db, "CREATE TABLE "+table+"(v text)")
	mustExec(t, db, "GRANT INSERT, SELECT ON "+table+" TO PUBLIC")
	mustExec(t, db, "CREATE FUNCTION "+notice+"(n int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN "+
		"RAISE NOTICE '%', repeat('x', n); RETURN n; END $$")
	b, err := Open(t.Context(), dsn, Config{MaxConns: 1, MaxResultBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	fence := unique("ml")
	limit := maxMessageLen(64 << 10)

	// A row of the limit's size in binary passes the guard and the limit.
	res, err := b.Exec(t.Context(), fence, 1, []Statement{{SQL: "SELECT repeat('y', 60000) AS v"}})
	if err != nil {
		t.Fatalf("row within MaxResultBytes: %v", err)
	}
	if got := len(res[0].Rows[0][0].(string)); got != 60000 {
		t.Errorf("row: got %d bytes, want 60000", got)
	}

	_, err = b.Exec(t.Context(), fence, 1, []Statement{
		{SQL: "INSERT INTO " + table + " VALUES ('error')"},
		{SQL: "SELECT repeat('x', $1::int)::int", Params: []any{float64(limit + 1)}},
	})
	r := refusal(t, err, tokens.ReasonStatementFailed)
	if r.Metadata["statement"] != "1" || r.Metadata["outcome"] != "" || !strings.Contains(r.Msg, "an error of") {
		t.Errorf("huge error: got %v (metadata %v), want STATEMENT_FAILED at statement 1, outcome known", err, r.Metadata)
	}

	_, err = b.Exec(t.Context(), fence, 1, []Statement{
		{SQL: "INSERT INTO " + table + " VALUES ('notice')"},
		{SQL: "INSERT INTO " + table + " SELECT " + notice + "($1::int)::text", Params: []any{float64(limit + 1)}},
	})
	r = refusal(t, err, tokens.ReasonBackendUnavailable)
	if r.Metadata["outcome"] != "unknown" || !strings.Contains(r.Msg, "a notice of") {
		t.Errorf("huge notice: got %v (metadata %v), want BACKEND_UNAVAILABLE, outcome unknown", err, r.Metadata)
	}

	// A notice within the limit changes nothing; the backend carries on.
	if _, err := b.Exec(t.Context(), fence, 1, []Statement{{SQL: "INSERT INTO " + table + " SELECT " + notice + "(100000)::text"}}); err != nil {
		t.Fatalf("write after the refusals: %v", err)
	}
	rows, err := db.Query(t.Context(), "SELECT left(v, 10) FROM "+table+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "100000" {
		// The notice's write rolls back too here: its connection was
		// closed before the server read the Sync's commit (the server
		// blocked sending the notice). Either is honest for "unknown".
		if len(got) != 2 || got[0] != "100000" || got[1] != "notice" {
			t.Errorf("rows: got %q, want [100000] (or the notice's write too)", got)
		}
	}
}

// TestMessageLimiter: the limiter passes a stream byte for byte however
// its reads are cut, and stops in front of the first message over its
// limit, with the message's type.
func TestMessageLimiter(t *testing.T) {
	t.Parallel()
	msg := func(typ byte, n int) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(n+4))
		return append(b, bytes.Repeat([]byte{'.'}, n)...)
	}
	var ok []byte
	for _, n := range []int{0, 1, 99, 100, 3} {
		ok = append(ok, msg('D', n)...)
	}
	stream := append(append([]byte(nil), ok...), msg('E', 101)...)
	stream = append(stream, msg('Z', 1)...)
	for _, chunk := range []int{1, 2, 3, 5, 7, 64, 1 << 20} {
		m := &messageLimiter{r: &chunkReader{b: stream, n: chunk}, limit: 100}
		got, err := io.ReadAll(m)
		var big *messageTooLargeError
		if !errors.As(err, &big) || big.typ != 'E' || big.size != 101 {
			t.Errorf("chunks of %d: got error %v, want an error message of 101 bytes over the limit", chunk, err)
		}
		// A header begun in an earlier read has passed in part.
		if !bytes.HasPrefix(stream, got) || len(got) < len(ok) || len(got) > len(ok)+4 {
			t.Errorf("chunks of %d: passed %d bytes, want the %d before the message over the limit", chunk, len(got), len(ok))
		}
	}
}

// chunkReader reads b n bytes at a time.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[k:]
	return k, nil
}
