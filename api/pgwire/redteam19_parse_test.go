package pgwire_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
)

// TestRedTeam19ParseRunsDomainCheck: the listener sends a client's Parse
// (and Describe, Close) before the transaction's fence check, which goes
// in front of the first Bind or Execute only, on the premise that "Parse,
// Describe and Close run nothing of the client's" (client.go, extended).
// But PostgreSQL's parse analysis converts a literal to its type with the
// type's input function, and array_in converts each element with the
// element type's input function: for an array of a domain that is
// domain_in, which evaluates the domain's CHECK, and a CHECK may call any
// function. A segment of Parse then Sync (what pgx's Prepare sends, with a
// Describe) therefore runs client code in an implicit transaction that no
// fence check ever enters, and the server commits it at the Sync.
//
// Attack: a zombie whose term ended (the next leader wrote) sends
// Parse("SELECT '{1}'::rt19_d[]") and Sync, rt19_d being a domain whose
// CHECK calls a function that inserts a row; and the same with a function
// that calls fencegate.advance_session with 2^63-1, as the transaction's
// first statement.
//
// What happens (PostgreSQL 15): no error, ReadyForQuery 'I'; the row is
// stored "parse:UNFENCED" after the next leader's, and the fence's mark
// moves from the current term to 9223372036854775807, so every later
// leader is STALE_TOKEN; no audit record, no metric.
//
// Expected: nothing of the client's runs outside a fenced transaction: no
// row stored UNFENCED, the fence's mark unmoved.
func TestRedTeam19ParseRunsDomainCheck(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	const fence = "rt19-parse"
	t.Cleanup(func() { // forget a poisoned mark
		_, _ = e.admin.Exec(context.WithoutCancel(ctx), "SELECT fencegate.reset($1, 0)", fence)
	})
	e.table(t, "rt19_parse")
	for _, sql := range []string{
		"DROP DOMAIN IF EXISTS rt19_dw, rt19_da",
		"CREATE OR REPLACE FUNCTION rt19_w(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " +
			"INSERT INTO rt19_parse (v) VALUES ('parse:' || " + fencedMark + "); RETURN true; END $$",
		"CREATE OR REPLACE FUNCTION rt19_a(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " +
			"EXECUTE 'SELECT fence' || 'gate.advance_session($1, $2)' USING '" + fence + "'::text, 9223372036854775807::bigint; RETURN true; END $$",
		"CREATE DOMAIN rt19_dw AS int CHECK (rt19_w(VALUE))",
		"CREATE DOMAIN rt19_da AS int CHECK (rt19_a(VALUE))",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	old, resign := e.lead(t, fence)
	z := e.raw(t, fence, old)
	cur := e.newTerm(t, fence, "rt19_parse", resign)

	// The zombie: Parse and Sync only (pgx's Prepare adds a Describe).
	z.send(&pgproto3.Parse{Name: "p1", Query: "SELECT '{1}'::rt19_dw[]"}, &pgproto3.Describe{ObjectType: 'S', Name: "p1"}, &pgproto3.Sync{})
	errs, st, err := z.results(1)
	if err != nil {
		t.Fatal(err)
	}
	got := e.values(t, "rt19_parse")
	t.Logf("stale token %d (current %d), Parse of a domain-array literal: errors %q, status %q; rows %q", old, cur, errs, st, got)
	for _, v := range got {
		if strings.HasPrefix(v, "parse:") {
			t.Errorf("HOLE: row %q written by a zombie (token %d, term %d current) through a Parse and Sync, with no fence check", v, old, cur)
		}
	}

	z.send(&pgproto3.Parse{Query: "SELECT '{1}'::rt19_da[]"}, &pgproto3.Sync{})
	errs, st, err = z.results(1)
	if err != nil {
		t.Fatal(err)
	}
	mark := markOf(t, e, fence)
	t.Logf("advance_session from a Parse: errors %q, status %q; mark %d (current term %d)", errs, st, mark, cur)
	if mark != cur {
		t.Errorf("HOLE: a zombie's Parse moved fence %s's mark from %d to %d: every later leader is fenced out", fence, cur, mark)
	}
}

// TestRedTeam19ParseBypassesPolicy: the same hole as
// TestRedTeam19ParseRunsDomainCheck, seen from the policy: the listener
// asks the policy (AdmitSQL) only where it puts a fence check, so a Parse
// and Sync, which get none, run for a caller whom an effect: deny rule
// cuts off from the fence.
//
// Attack: with a policy that denies postgres:worker sql.write on every
// fence (a plain INSERT is refused 42501, the control), the worker sends
// Parse("SELECT '{1}'::rt19_dp[]") and Sync, rt19_dp's CHECK inserting a
// row.
//
// What happens: the row "denied:UNFENCED" is stored.
//
// Expected: nothing is written for a caller the policy denies.
func TestRedTeam19ParseBypassesPolicy(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	rt17Put(t, path, []byte(`rules:
  - name: cut-off-worker
    effect: deny
    principals: ["postgres:worker"]
    fences: ["*"]
    actions: [sql.write]
`))
	store, err := policy.NewStore(path, policy.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, pgwire.Config{}, envOptions{proxy: proxy.Options{Policy: store}})
	e.table(t, "rt19_deny")
	for _, sql := range []string{
		"DROP DOMAIN IF EXISTS rt19_dp",
		"CREATE OR REPLACE FUNCTION rt19_p(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " +
			"INSERT INTO rt19_deny (v) VALUES ('denied:' || " + fencedMark + "); RETURN true; END $$",
		"CREATE DOMAIN rt19_dp AS int CHECK (rt19_p(VALUE))",
	} {
		if _, err := e.admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tok, _ := e.lead(t, "rt19-deny")
	z := e.raw(t, "rt19-deny", tok)
	errs, _ := z.query("INSERT INTO rt19_deny (v) VALUES ('control')")
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "42501") {
		t.Fatalf("control: a plain INSERT of a denied caller got errors %q, want 42501", errs)
	}
	z.send(&pgproto3.Parse{Query: "SELECT '{1}'::rt19_dp[]"}, &pgproto3.Sync{})
	errs, st, err := z.results(1)
	if err != nil {
		t.Fatal(err)
	}
	got := e.values(t, "rt19_deny")
	t.Logf("denied caller, Parse and Sync: errors %q, status %q; rows %q", errs, st, got)
	if len(got) > 0 {
		t.Errorf("HOLE: a caller the policy denies wrote %q through a Parse and Sync", got)
	}
}

// TestRedTeam19DescribeRevalidates: PostgreSQL analyses a prepared
// statement again when its plan was invalidated (here by DDL on a table it
// reads) as it describes it (Describe of a statement, RevalidateCachedQuery),
// which converts its literals with their types' input functions again: a
// Describe, as a Parse, runs a domain's CHECK, and so any function.
//
// Attack: with its token current, the zombie prepares a statement with a
// literal of an array of a domain whose CHECK writes nothing yet, reading a
// table: with Parse, or with SQL PREPARE in place of a statement it parsed
// as SET TRANSACTION (which fencegate lets run before a transaction's
// check). Its term ends; the CHECK's function is replaced with one that
// inserts a row, and the table altered. The zombie sends Describe of the
// statement and Sync.
//
// Without the check in front of a Describe: no error, the row stored
// "describe:UNFENCED" after the next leader's; with the check but without
// SET TRANSACTION prepared again in front of its Describe (reparse), the
// row "setup:UNFENCED".
//
// Expected: nothing is written; the Describe of the plain statement is
// refused (the zombie's token is stale).
func TestRedTeam19DescribeRevalidates(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	for _, tc := range []struct {
		name    string
		prepare func(z *rawConn, sql string)
	}{
		{"describe", func(z *rawConn, sql string) {
			z.send(&pgproto3.Parse{Name: "rt19_p", Query: sql}, &pgproto3.Sync{})
			if errs, _, err := z.results(1); err != nil || len(errs) != 0 {
				t.Fatalf("Parse with the current token: errors %q, %v", errs, err)
			}
		}},
		{"setup", func(z *rawConn, sql string) {
			z.send(&pgproto3.Parse{Name: "rt19_p", Query: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"}, &pgproto3.Sync{})
			if errs, _, err := z.results(1); err != nil || len(errs) != 0 {
				t.Fatalf("Parse with the current token: errors %q, %v", errs, err)
			}
			if errs, _ := z.query("DEALLOCATE rt19_p; PREPARE rt19_p AS " + sql); len(errs) != 0 {
				t.Fatalf("PREPARE with the current token: errors %q", errs)
			}
		}},
	} {
		fence, table, domain, fn := "rt19-desc-"+tc.name, "rt19_desc_"+tc.name, "rt19_dd_"+tc.name, "rt19_dc_"+tc.name
		e.table(t, table)
		check := func(body string) string {
			return "CREATE OR REPLACE FUNCTION " + fn + "(i int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN " + body + " RETURN true; END $$"
		}
		for _, sql := range []string{
			"DROP DOMAIN IF EXISTS " + domain,
			check(""),
			"CREATE DOMAIN " + domain + " AS int CHECK (" + fn + "(VALUE))",
		} {
			if _, err := e.admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		old, resign := e.lead(t, fence)
		z := e.raw(t, fence, old)
		tc.prepare(z, "SELECT '{1}'::"+domain+"[] FROM "+table)
		cur := e.newTerm(t, fence, table, resign)
		for _, sql := range []string{
			check("INSERT INTO " + table + " (v) VALUES ('" + tc.name + ":' || " + fencedMark + ");"),
			"ALTER TABLE " + table + " ADD COLUMN rt19_x int", // invalidates rt19_p's plan
		} {
			if _, err := e.admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		z.send(&pgproto3.Describe{ObjectType: 'S', Name: "rt19_p"}, &pgproto3.Sync{})
		errs, st, err := z.results(1)
		if err != nil {
			t.Fatal(err)
		}
		got := e.values(t, table)
		t.Logf("%s: stale token %d (current %d), Describe of an invalidated statement: errors %q, status %q; rows %q", tc.name, old, cur, errs, st, got)
		for _, v := range got {
			if strings.HasPrefix(v, tc.name+":") {
				t.Errorf("HOLE: row %q written by a zombie (token %d, term %d current) through a Describe and Sync, with no fence check", v, old, cur)
			}
		}
		if tc.name == "describe" && (len(errs) != 1 || !strings.HasPrefix(errs[0], "FG00")) {
			t.Errorf("Describe with a stale token: errors %q, want one fencegate refusal", errs)
		}
	}
}

// TestRedTeam19PrepareFenced: a driver's prepare (pgx Prepare: Parse,
// Describe, Sync) gets the fence check in front of its Parse: with the
// current token it works, and with a stale one it is refused with the
// SQLSTATE of the reason, as the Bind of a statement prepared before is.
func TestRedTeam19PrepareFenced(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	const fence = "rt19-prepare"
	e.table(t, "rt19_prep")
	old, resign := e.lead(t, fence)
	z := e.connect(t, fence, old)
	if _, err := z.Prepare(ctx, "rt19_ins", "INSERT INTO rt19_prep (v) VALUES ($1)"); err != nil {
		t.Fatalf("Prepare with the current token: %v", err)
	}
	if _, err := z.Exec(ctx, "rt19_ins", "current"); err != nil {
		t.Fatalf("Exec of the prepared statement with the current token: %v", err)
	}
	e.newTerm(t, fence, "rt19_prep", resign)
	_, err := z.Prepare(ctx, "rt19_sel", "SELECT count(*) FROM rt19_prep WHERE v = $1")
	prep := wantCodeOf(err)
	_, err = z.Exec(ctx, "rt19_ins", "zombie")
	bind := wantCodeOf(err)
	if prep != "FG001" && prep != "FG002" || prep != bind {
		t.Errorf("stale token: Prepare got SQLSTATE %q, the Bind of a prepared statement %q; want both FG001 or FG002, the same", prep, bind)
	}
	if got := e.values(t, "rt19_prep"); len(got) != 2 {
		t.Errorf("rows %q, want the current and the leader's", got)
	}
}
