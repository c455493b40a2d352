package migrations_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/migrations"
)

// TestAdvanceTermSharedLockKey: from version 11 advance_term refuses the
// current term of an election whose advisory lock key another row of the
// term table derives too (FG008, DETAIL term=<n>, the other named), in a
// read-only transaction as well, whatever operators the caller's search
// path finds first; and accepts it under a derivation that tells the two
// names apart.
func TestAdvanceTermSharedLockKey(t *testing.T) {
	ctx := t.Context()
	conn := connect(t, freshDB(t))
	if err := migrations.Apply(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var fa, fb string
	if err := conn.QueryRow(ctx, `
SELECT min(n), max(n) FROM (
  SELECT 'coll_' || i AS n, hashtext('coll_' || i) AS h FROM generate_series(1, 400000) AS i) AS s
 GROUP BY h HAVING count(*) > 1 LIMIT 1`).Scan(&fa, &fb); err != nil {
		t.Fatalf("no colliding pair found: %v", err)
	}
	// Both elections have a row; a (superuser) session holds the shared
	// hashtext key and each name's hashtextextended key.
	for _, sql := range []string{
		"CREATE TABLE public.leadership_term (name text PRIMARY KEY, term bigint NOT NULL)",
		"GRANT SELECT, UPDATE (term) ON public.leadership_term TO fencegate_owner",
		"INSERT INTO public.leadership_term VALUES ('" + fa + "', 3), ('" + fb + "', 7)",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	leader := connect(t, conn.Config().ConnString())
	if _, err := leader.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1)), pg_advisory_lock(hashtextextended($1, 0)), pg_advisory_lock(hashtextextended($2, 0))", fa, fb); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, c *pgx.Conn, readOnly bool, name string, token int64, key string) error {
		t.Helper()
		mode := pgx.ReadWrite
		if readOnly {
			mode = pgx.ReadOnly
		}
		tx, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, "SELECT fencegate.advance_term($1, $2, 'public.leadership_term', $3)", name, token, key)
		return err
	}
	// A caller whose search path finds = on int4 and <> on text that would
	// hide the other row.
	evil := connect(t, conn.Config().ConnString())
	if _, err := evil.Exec(ctx, `CREATE SCHEMA evil;
CREATE FUNCTION evil.no(integer, integer) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE OPERATOR evil.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = evil.no);
CREATE FUNCTION evil.no(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE OPERATOR evil.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.no);
SELECT set_config('search_path', 'evil, pg_catalog, public', false)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		desc     string
		conn     *pgx.Conn
		readOnly bool
		name     string
		other    string
		token    int64
	}{
		{"B's term, lock held by A's leader", conn, false, fb, fa, 7},
		{"A's term, lock held by A's leader", conn, false, fa, fb, 3},
		{"read-only transaction", conn, true, fb, fa, 7},
		{"caller's operators", evil, false, fb, fa, 7},
	} {
		err := check(t, c.conn, c.readOnly, c.name, c.token, "hashtext")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != migrations.LockKeySharedSQLState || pgErr.Detail != "term="+strconv.FormatInt(c.token, 10) ||
			!strings.Contains(pgErr.Message, `election "`+c.other+`"`) || !strings.Contains(pgErr.Message, "hashtextextended") {
			t.Errorf("%s: got %v, want SQLSTATE %s naming %s", c.desc, err, migrations.LockKeySharedSQLState, c.other)
		}
	}
	// Other refusals come first: a stale or unknown token says so.
	for token, want := range map[int64]string{6: migrations.StaleSQLState, 8: migrations.UnknownTermSQLState} {
		var pgErr *pgconn.PgError
		if err := check(t, conn, false, fb, token, "hashtext"); !errors.As(err, &pgErr) || pgErr.Code != want {
			t.Errorf("token %d of %s: got %v, want SQLSTATE %s", token, fb, err, want)
		}
	}
	// hashtextextended tells the names apart: each term is current.
	for name, token := range map[string]int64{fa: 3, fb: 7} {
		if err := check(t, conn, false, name, token, "hashtextextended"); err != nil {
			t.Errorf("%s/%d under hashtextextended: got %v, want accepted", name, token, err)
		}
	}
}
