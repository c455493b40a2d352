package pgwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// Every input below comes from a client. A panic on any of them would end
// the whole process, every session with it, so each fuzz target first
// asks that nothing panics, then that the result keeps its promises.

// FuzzClassify: classify never panics; where it puts the check is inside
// the string, counted in characters; and a string it lets through ends a
// transaction only with its last statement, never with AND CHAIN, and
// names no relation of schema fencegate.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"", ";", "SELECT 1", "INSERT INTO t VALUES (1); COMMIT",
		"COMMIT; INSERT INTO t VALUES (1)", "COMMIT AND CHAIN", "ROLLBACK TO SAVEPOINT a",
		"BEGIN ISOLATION LEVEL SERIALIZABLE; INSERT INTO t VALUES ('é')",
		"SET TRANSACTION READ ONLY; SET TRANSACTION SNAPSHOT '1'; SELECT 1",
		"BEGIN; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION; COMMIT PREPARED 'x'",
		"SET fencegate.token = 7", "SHOW fencegate.fence", "DISCARD ALL", "EXECUTE s1", "DEALLOCATE ALL",
		"SELECT * FROM fencegate.fences", `SELECT "FENCEGATE".advance('a', 1)`, "SELECT set_config('fencegate.x', '1', false)",
		"DO $$ BEGIN COMMIT; END $$", "CALL p()", "PREPARE TRANSACTION 'x'", "/* ; */ SELECT ';'",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		vd := classify(sql)
		if vd.text != sql {
			t.Fatalf("verdict of %q is for %q", sql, vd.text)
		}
		if vd.setupEnd < 0 || vd.setupEnd > len(sql) || vd.setup < 0 {
			t.Fatalf("%q: setup %d statements, check at byte %d of %d", sql, vd.setup, vd.setupEnd, len(sql))
		}
		if vd.setupEnd > 0 && vd.setupAt != utf8.RuneCountInString(sql[:vd.setupEnd]) {
			t.Fatalf("%q: check at character %d, byte %d is character %d", sql, vd.setupAt, vd.setupEnd, utf8.RuneCountInString(sql[:vd.setupEnd]))
		}
		if vd.refuse != "" {
			return
		}
		tree, err := pg_query.Parse(sql)
		if err != nil {
			t.Fatalf("%q: let through, but does not parse: %v", sql, err)
		}
		for i, raw := range tree.Stmts {
			if ts := raw.Stmt.GetTransactionStmt(); ts != nil {
				if ts.Chain {
					t.Fatalf("%q: let through with AND CHAIN", sql)
				}
				switch ts.Kind {
				case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT, pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK,
					pg_query.TransactionStmtKind_TRANS_STMT_PREPARE, pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED,
					pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
					if i != len(tree.Stmts)-1 || vd.kind != kindEnd {
						t.Fatalf("%q: statement %d of %d ends the transaction, let through as kind %d", sql, i+1, len(tree.Stmts), vd.kind)
					}
				}
			}
		}
		if vd.local() {
			return // fencegate's own SET and SHOW, never sent as written
		}
		js, err := pg_query.ParseToJSON(sql)
		if err != nil {
			t.Fatalf("%q: %v", sql, err)
		}
		if strings.Contains(strings.ToLower(js), `"schemaname":"fencegate"`) {
			t.Fatalf("%q: let through, and names schema fencegate: %s", sql, js)
		}
	})
}

// FuzzSplitOptions: splitOptions never panics, and what it passes on to
// the server holds no fencegate.* setting in any of the forms it takes.
func FuzzSplitOptions(f *testing.F) {
	for _, s := range []string{
		"", "-c fencegate.fence=jobs -c fencegate.token=42", `-c search_path=a\ b -cfencegate.token=1`,
		"--fencegate.token=3 --work-mem=4MB", "-c", "-c -c", `\`, `-c fence\gate.token=1`, "--fencegate-x=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rest, _, _, _ := splitOptions(s)
		again, fence, token, other := splitOptions(rest)
		if fence != "" || token != "" || other != "" {
			t.Fatalf("options %q: passed on %q, which still sets fence %q, token %q, other %q", s, rest, fence, token, other)
		}
		if again != rest {
			t.Fatalf("options %q: passed on %q, which splits again to %q", s, rest, again)
		}
	})
}

// FuzzMsgReader: the message framing never panics, and each message it
// returns is one whole message as its header gives it; a streamed one's
// body, copied on or skipped, is as long as its header says, and the
// message after it is framed from its end.
func FuzzMsgReader(f *testing.F) {
	msg := func(typ byte, body string) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
		return append(b, body...)
	}
	f.Add(msg('Q', "SELECT 1\x00"))
	f.Add(append(msg('P', "\x00SELECT $1\x00\x00\x00"), msg('S', "")...))
	f.Add([]byte{'Q', 0, 0, 0, 3})
	f.Add([]byte{'Q', 0x7f, 0xff, 0xff, 0xff})
	f.Add(msg('d', strings.Repeat("x", 3*bufSize)))
	f.Add(append(append(msg('d', strings.Repeat("x", 3*bufSize)), msg('d', strings.Repeat("y", 2*bufSize))...), msg('Q', "SELECT 1\x00")...))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, streams := range []string{"", "d"} {
			m := newMsgReader(bytes.NewReader(in))
			m.streams = streams
			for i := range 1 << 16 {
				typ, body, raw, err := m.next()
				if err != nil {
					break
				}
				if m.streamed() {
					want := int(binary.BigEndian.Uint32(raw[1:5])) + 1 - len(raw)
					if len(raw) != bufSize || len(body) != len(raw)-5 || raw[0] != typ || typ != 'd' || want <= 0 {
						t.Fatalf("streamed message %q: header % x, %d bytes of it", typ, raw[:5], len(raw))
					}
					if i%2 == 1 {
						continue // skipped by next
					}
					var out bytes.Buffer
					if err := m.copyBody(&out); err != nil {
						break
					}
					if out.Len() != want {
						t.Fatalf("streamed message %q: copied %d bytes of %d", typ, out.Len(), want)
					}
					continue
				}
				if len(raw) != len(body)+5 || raw[0] != typ || int(binary.BigEndian.Uint32(raw[1:5])) != len(body)+4 {
					t.Fatalf("message %q: %d bytes with a body of %d, header % x", typ, len(raw), len(body), raw[:5])
				}
			}
		}
	})
}

// TestMsgReaderHoldsWhatArrives: a header claiming a large message makes
// the reader allocate about what the client has sent, not the claim; and a
// reader with a limit refuses a longer message before reading any of it.
func TestMsgReaderHoldsWhatArrives(t *testing.T) {
	claim := func(n int, then int) []byte {
		b := []byte{'Q', 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(n))
		return append(b, make([]byte, then)...)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, _, err := newMsgReader(bytes.NewReader(claim(200<<20, 100<<10))).next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a message cut short: got %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("a header claiming 200 MiB, then 100 KiB, made the reader allocate %d bytes", got)
	}

	m := newMsgReader(bytes.NewReader(append(claim(4+maxAuthMessage, maxAuthMessage), claim(5+maxAuthMessage, 0)...)))
	m.limit = maxAuthMessage
	if _, body, _, err := m.next(); err != nil || len(body) != maxAuthMessage {
		t.Fatalf("a message at the limit: got %d bytes, %v", len(body), err)
	}
	if _, _, _, err := m.next(); err == nil {
		t.Fatal("a message over the limit was read")
	}
}
