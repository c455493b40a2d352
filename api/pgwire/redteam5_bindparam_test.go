package pgwire_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam5SetupBindParameter: a Bind of a statement that sets a
// transaction up (SET TRANSACTION) is sent before the transaction's check
// (the deferral), on the premise that it runs nothing of the client's.
// But a Bind converts its parameters with their types' input functions,
// and a domain's input evaluates its CHECK constraint, which may call any
// function: the client parses the unnamed statement as SET TRANSACTION
// READ ONLY with a parameter of such a domain (the text need not use it)
// and binds it with a value. The function runs before the check, in a
// transaction with no transaction id yet: it writes unfenced, or calls
// advance_session with a token of its choosing as the transaction's
// first statement (the fence's mark moves to 2^63-1, fencing out every
// later leader). reparse leaves the unnamed statement alone; a named one
// is refused today only because reparse drops its parameter types.
func TestRedTeam5SetupBindParameter(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	const fence = "rt5-bindparam"
	t.Cleanup(func() { // forget a poisoned mark
		_, _ = e.admin.Exec(context.WithoutCancel(ctx), "SELECT fencegate.reset($1, 0)", fence)
	})
	e.table(t, "rt5_bindparam")
	for _, sql := range []string{
		"DROP DOMAIN IF EXISTS rt5_dw, rt5_da",
		"CREATE OR REPLACE FUNCTION rt5_w(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " +
			"INSERT INTO rt5_bindparam (v) VALUES ('bind:' || " + fencedMark + "); RETURN true; END $$",
		"CREATE OR REPLACE FUNCTION rt5_a(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " +
			"EXECUTE 'SELECT fence' || 'gate.advance_session($1, $2)' USING '" + fence + "'::text, 9223372036854775807::bigint; RETURN true; END $$",
		"CREATE DOMAIN rt5_dw AS int CHECK (rt5_w(VALUE))",
		"CREATE DOMAIN rt5_da AS int CHECK (rt5_a(VALUE))",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	oid := func(typ string) uint32 {
		var o uint32
		if err := e.admin.QueryRow(ctx, "SELECT $1::regtype::oid", typ).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	tok, _ := e.lead(t, fence)
	z := e.raw(t, fence, tok)
	run := func(typ uint32) ([]string, byte) {
		t.Helper()
		z.send(&pgproto3.Parse{Query: "SET TRANSACTION READ ONLY", ParameterOIDs: []uint32{typ}},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
		errs, st, err := z.results(1)
		if err != nil {
			t.Fatal(err)
		}
		return errs, st
	}

	errs, _ := run(oid("rt5_dw"))
	got := e.values(t, "rt5_bindparam")
	t.Logf("write: errors %q, rows %q", errs, got)
	for _, v := range got {
		if strings.HasSuffix(v, "UNFENCED") {
			t.Errorf("HOLE: row %q written before the fence check, by a Bind parameter's domain check", v)
		}
	}

	errs, _ = run(oid("rt5_da"))
	mark := markOf(t, e, fence)
	t.Logf("advance_session: errors %q, mark %d (token %d)", errs, mark, tok)
	if mark != tok {
		t.Errorf("HOLE: a Bind parameter's domain check moved fence %s's mark from %d to %d", fence, tok, mark)
	}
}
