package pgwire_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// PostgreSQL converts a prepared statement's or portal's name, and the
// text of a query, from client_encoding to the server's encoding before
// it cuts a name to 63 bytes and compares it; fencegate sees the client's
// bytes. With client_encoding LATIN1 on a UTF8 database, é is one byte to
// fencegate and two to the server: 31 of them and "x1", or "x2", are two
// names of 33 bytes to fencegate, and one name (cut from 64 bytes to 63)
// to the server. The listener refuses names that are not ASCII, which
// every driver's are.

// asciiLatin1 returns a name of 31 LATIN1 é's followed by suffix: 33
// bytes to fencegate, 64 in UTF8, cut to the same 63 for any one-byte
// suffix.
func asciiLatin1(suffix string) string { return strings.Repeat("\xe9", 31) + "x" + suffix }

// asciiAttack runs steps, each ended by one ReadyForQuery, on a raw
// connection to fence with client_encoding set to enc, and returns the
// errors the client saw and the rows of table.
func asciiAttack(t *testing.T, name, enc string, setup []pgproto3.FrontendMessage, steps func(table string) [][]pgproto3.FrontendMessage) (errs, rows []string) {
	t.Helper()
	table := "an_" + name
	fence := "an-" + strings.ReplaceAll(name, "_", "-")
	e := newEnv(t, pgwire.Config{})
	e.table(t, table)
	tok, _ := e.lead(t, fence)
	z := e.raw(t, fence, tok)
	if setup != nil {
		z.send(setup...)
		if errs, _, err := z.results(1); err != nil || len(errs) > 0 {
			t.Fatalf("setup: errors %q, %v", errs, err)
		}
	}
	if errs, _ := z.query("SET client_encoding = '" + enc + "'"); len(errs) > 0 {
		t.Fatalf("SET client_encoding: %q", errs)
	}
	for i, step := range steps(table) {
		got, _, err := z.results0(step)
		if err != nil {
			t.Fatalf("step %d: %v (errors %q)", i, err, got)
		}
		errs = append(errs, got...)
	}
	rows = e.values(t, table)
	t.Logf("errors %q; rows %q", errs, rows)
	e.noRows(t, table)
	return errs, rows
}

// results0 sends msgs and reads the one ReadyForQuery they end with.
func (r *rawConn) results0(msgs []pgproto3.FrontendMessage) ([]string, byte, error) {
	r.t.Helper()
	r.send(msgs...)
	return r.results(1)
}

// wantASCIIRefusal checks the attack was refused as a name that is not
// ASCII, and wrote nothing.
func wantASCIIRefusal(t *testing.T, errs, rows []string) {
	t.Helper()
	if len(errs) == 0 || !strings.HasPrefix(errs[0], "FG006") || !strings.Contains(errs[0], "must be ASCII") {
		t.Errorf("got errors %q, want FG006 (names must be ASCII) first", errs)
	}
	if len(rows) != 0 {
		t.Errorf("got rows %q, want none", rows)
	}
}

// TestNonASCIIStatementNamesRefused: TestRedTeam21LongStatementNameHidesCommit
// with names fencegate keeps apart and the server, after converting them
// from LATIN1, does not: the SELECT's statement is dropped and made again
// as COMMIT under the other name, and the Bind of the first name runs it,
// ending the fenced transaction before the pipelined INSERT.
func TestNonASCIIStatementNamesRefused(t *testing.T) {
	one, two := asciiLatin1("1"), asciiLatin1("2")
	errs, rows := asciiAttack(t, "stmt", "LATIN1", nil, func(table string) [][]pgproto3.FrontendMessage {
		return [][]pgproto3.FrontendMessage{
			{&pgproto3.Parse{Name: one, Query: "SELECT 1"}, &pgproto3.Sync{}},
			{&pgproto3.Close{ObjectType: 'S', Name: two}, &pgproto3.Parse{Name: two, Query: "COMMIT"}, &pgproto3.Sync{}},
			msgs(
				&pgproto3.Bind{PreparedStatement: one}, &pgproto3.Execute{},
				ext("INSERT INTO "+table+" (v) SELECT 'after:' || "+fencedMark),
				&pgproto3.Sync{},
			),
		}
	})
	wantASCIIRefusal(t, errs, rows)
}

// TestNonASCIIPortalNamesRefused: the same with portals (as
// TestRedTeam21LongPortalNameHidesCommit), in one segment.
func TestNonASCIIPortalNamesRefused(t *testing.T) {
	one, two := asciiLatin1("1"), asciiLatin1("2")
	setup := []pgproto3.FrontendMessage{
		&pgproto3.Parse{Name: "an_sel", Query: "SELECT 1"},
		&pgproto3.Parse{Name: "an_commit", Query: "COMMIT"},
		&pgproto3.Sync{},
	}
	errs, rows := asciiAttack(t, "portal", "LATIN1", setup, func(table string) [][]pgproto3.FrontendMessage {
		return [][]pgproto3.FrontendMessage{msgs(
			&pgproto3.Bind{DestinationPortal: one, PreparedStatement: "an_sel"},
			&pgproto3.Close{ObjectType: 'P', Name: two},
			&pgproto3.Bind{DestinationPortal: two, PreparedStatement: "an_commit"},
			&pgproto3.Execute{Portal: one},
			ext("INSERT INTO "+table+" (v) SELECT 'after:' || "+fencedMark),
			&pgproto3.Sync{},
		)}
	})
	wantASCIIRefusal(t, errs, rows)
}

// TestNonASCIISQLNamesRefused: SQL that names a prepared statement with
// an identifier that is not ASCII. fencegate's parser reads the text as
// UTF8 and cuts identifiers at a UTF8 character boundary; the server
// converts the text first. In EUC_JP, bytes C2 A1 are one kanji (three
// bytes in UTF8), in UTF8 ¡ (two): 61 a's and them are an identifier of
// 63 bytes to fencegate, left whole, and of 64 to the server, cut to the
// 61 a's, the name of the COMMIT parsed before: fencegate would judge the
// EXECUTE by a statement it never saw (executesEnd lets it pass) while
// the server runs the COMMIT. (EXECUTE is no transaction statement to
// PostgreSQL, which so runs what follows in the same string, or before
// the Sync, in the same transaction; the row stays fenced, and only the
// refusal tells.) PREPARE and DEALLOCATE of such names are refused too.
func TestNonASCIISQLNamesRefused(t *testing.T) {
	a61 := strings.Repeat("a", 61)
	setup := []pgproto3.FrontendMessage{&pgproto3.Parse{Name: a61, Query: "COMMIT"}, &pgproto3.Sync{}}
	for _, tc := range []struct{ name, sql string }{
		{"execute", `EXECUTE "` + a61 + "\xc2\xa1\"; INSERT INTO an_execute (v) SELECT 'after:' || " + fencedMark},
		{"execute_extended", `EXECUTE "` + a61 + "\xc2\xa1\""},
		{"prepare", "PREPARE \"\xc2\xa1x\" AS INSERT INTO an_prepare (v) SELECT 'after:' || " + fencedMark},
		{"deallocate", "DEALLOCATE \"" + a61 + "\xc2\xa1\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs, rows := asciiAttack(t, tc.name, "EUC_JP", setup, func(table string) [][]pgproto3.FrontendMessage {
				if tc.name == "execute_extended" {
					return [][]pgproto3.FrontendMessage{msgs(
						ext(tc.sql),
						ext("INSERT INTO "+table+" (v) SELECT 'after:' || "+fencedMark),
						&pgproto3.Sync{},
					)}
				}
				return [][]pgproto3.FrontendMessage{{&pgproto3.Query{String: tc.sql}}}
			})
			wantASCIIRefusal(t, errs, rows)
		})
	}
}

// TestASCIINamesUnaffected: a driver's named statements, and SQL
// PREPARE and EXECUTE of an ASCII name, run as before.
func TestASCIINamesUnaffected(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "an_ascii")
	tok, _ := e.lead(t, "an-ascii")
	c := e.connect(t, "an-ascii", tok)
	if _, err := c.Exec(ctx, "SET client_encoding = 'LATIN1'"); err != nil {
		t.Fatalf("SET client_encoding: %v", err)
	}
	if _, err := c.Prepare(ctx, "an_insert", "INSERT INTO an_ascii (v) SELECT $1::text || ':' || "+fencedMark); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	for _, v := range []string{"one", "two"} {
		if _, err := c.Exec(ctx, "an_insert", v); err != nil {
			t.Fatalf("exec an_insert %s: %v", v, err)
		}
	}
	// pgx's own cache names its statements stmtcache_<hex>.
	if _, err := c.Exec(ctx, "INSERT INTO an_ascii (v) SELECT $1::text || ':' || "+fencedMark, "cached"); err != nil {
		t.Fatalf("exec with the statement cache: %v", err)
	}
	if _, err := c.Exec(ctx, "PREPARE an_sql AS INSERT INTO an_ascii (v) SELECT 'sql:' || "+fencedMark); err != nil {
		t.Fatalf("SQL PREPARE: %v", err)
	}
	if _, err := c.Exec(ctx, "EXECUTE an_sql"); err != nil {
		t.Fatalf("SQL EXECUTE: %v", err)
	}
	if _, err := c.Exec(ctx, "DEALLOCATE an_sql"); err != nil {
		t.Fatalf("SQL DEALLOCATE: %v", err)
	}
	e.noRows(t, "an_ascii")
	if got := e.count(t, "an_ascii"); got != 4 {
		t.Errorf("got %d rows, want 4 (%q)", got, e.values(t, "an_ascii"))
	}
}
