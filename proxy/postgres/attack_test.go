package postgres

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// The tests here attack the pipeline with SQL the SQL check would refuse,
// to show what the pipeline's own defences do when the check misses.

// TestSmuggledTransactionIsNotAcknowledged: a statement that opens a
// transaction block (a comment ended by CR hides BEGIN from a filter that
// ends comments at LF) in a coalesced batch. The writes that follow on the
// connection join that block and commit only if something commits it. No
// write may be acknowledged that is not committed.
func TestSmuggledTransactionIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	b.uncheckedSQL = true
	db := admin(t)
	table := unique("smuggled")
	mustExec(t, db, "CREATE TABLE "+table+"(n int PRIMARY KEY)")
	insert := func(n int) Statement {
		return Statement{SQL: "INSERT INTO " + table + "(n) VALUES ($1)", Params: []any{float64(n)}}
	}

	const writes = 12
	busy := occupy(t, b, 1, 300*time.Millisecond)
	errs := make([]error, writes)
	var wg sync.WaitGroup
	for i := range writes {
		stmts := []Statement{insert(i)}
		if i == 3 {
			stmts = append(stmts, Statement{SQL: "-- x\rBEGIN\nWORK"})
		}
		wg.Go(func() { _, errs[i] = b.Exec(t.Context(), unique("fence"), 1, stmts) })
		time.Sleep(5 * time.Millisecond) // in order, into one batch
	}
	wg.Wait()
	busy.Wait()

	stored := map[int]bool{}
	rows, err := db.Query(t.Context(), "SELECT n FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		stored[n] = true
	}
	var acked int
	for i, err := range errs {
		if err == nil {
			acked++
			if !stored[i] {
				t.Errorf("write %d: acknowledged, but its row was not committed", i)
			}
			continue
		}
		r, ok := tokens.AsRefusal(err)
		if !ok {
			t.Fatalf("write %d: got %v, want a refusal", i, err)
		}
		if stored[i] && r.Metadata["outcome"] != "unknown" {
			t.Errorf("write %d: refused with %v as not applied, but its row was committed", i, err)
		}
	}
	if acked == writes {
		t.Errorf("every write acknowledged: the smuggled BEGIN went unnoticed")
	}
	// The connection with the open block was not reused.
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{insert(100)}); err != nil {
		t.Fatalf("write after the batch: %v", err)
	}
	var n int
	if err := db.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE n = 100").Scan(&n); err != nil || n != 1 {
		t.Errorf("write after the batch: committed rows got %d (%v), want 1", n, err)
	}
}

// TestSessionSettingsDoNotLeak: a write that changes a setting of the
// pooled session beyond its transaction does not change it for the next
// caller on the same connection.
func TestSessionSettingsDoNotLeak(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	b.uncheckedSQL = true
	db := admin(t)
	table := unique("readonly")
	mustExec(t, db, "CREATE TABLE "+table+"(n int)")
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "SELECT set_config('default_transaction_read_only', 'on', false)"},
	}); err != nil {
		t.Fatalf("attack write: %v", err)
	}
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "INSERT INTO " + table + " VALUES (1)"},
	}); err != nil {
		t.Fatalf("next caller's write: got %v, want nil (the session's read-only default must not outlive the attack)", err)
	}
}

// TestWriteTimeLimit: the write's time limit bounds all of its statements
// together, not each one: three sleeps each well within statement_timeout
// add up past the write's limit, and the write rolls back.
func TestWriteTimeLimit(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1, StatementTimeout: 5 * time.Second, WriteTimeout: 500 * time.Millisecond})
	db := admin(t)
	table := unique("slow")
	mustExec(t, db, "CREATE TABLE "+table+"(n int)")
	sleep := Statement{SQL: "SELECT pg_sleep(0.3)"}
	start := time.Now()
	_, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "INSERT INTO " + table + " VALUES (1)"}, sleep, sleep, sleep,
	})
	elapsed := time.Since(start)
	r := refusal(t, err, tokens.ReasonBackendUnavailable)
	if _, unknown := r.Metadata["outcome"]; unknown || !strings.Contains(r.Msg, "time limit") {
		t.Errorf("refusal: got %v (metadata %v), want the time limit named and a known outcome", err, r.Metadata)
	}
	if elapsed > 4*time.Second {
		t.Errorf("refused after %v, want about the 500ms limit", elapsed)
	}
	if got := count(t, db, table); got != 0 {
		t.Errorf("rows: got %d, want 0", got)
	}
	if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{sleep}); err != nil {
		t.Errorf("a write within the limit: %v", err)
	}
}

// TestCallerSQLAttacks sends the attacks found against fencegate through a
// backend serving as a runtime role, with the SQL check on and, to show
// the database's own defences, off. Either way the other fence's mark and
// the victim table stay as they were, and the next write on the same
// connection sees no state left behind.
func TestCallerSQLAttacks(t *testing.T) {
	db := admin(t)
	victim := unique("victim")
	mustExec(t, db, "CREATE TABLE "+victim+"(n int)")
	mustExec(t, db, "INSERT INTO "+victim+" VALUES (1)")
	const other, maxToken = "other_fence", "9223372036854775807"
	if _, err := backend.Exec(t.Context(), other, 5, []Statement{{SQL: "SELECT 1"}}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		sql  string
		// want is the refusal with the SQL check on; unchecked, the one
		// the database gives ("" means it runs and must do no harm).
		want, unchecked tokens.Reason
	}{
		{"advance another fence", "SELECT fencegate.advance('" + other + "', " + maxToken + ")", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"upsert the mark", "INSERT INTO fencegate.fences(name, token) VALUES ('" + other + "', " + maxToken + ") ON CONFLICT (name) DO UPDATE SET token = excluded.token", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"comment in the name", "UPDATE fencegate/**/.fences SET token = " + maxToken, tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"unicode escape", `UPDATE U&"fenc\0065gate".fences SET token = ` + maxToken, tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"dynamic SQL", "DO $$ BEGIN EXECUTE format('UPDATE %I.fences SET token = " + maxToken + "', 'fence'||'gate'); END $$", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"search path", "SELECT set_config('search_path', 'evil, pg_catalog, public', false)", tokens.ReasonInvalidRequest, ""},
		{"read-only sessions", "SELECT set_config('default_transaction_read_only', 'on', false)", tokens.ReasonInvalidRequest, ""},
		{"statement timeout", "SELECT set_config('statement_timeout', '0', false)", tokens.ReasonInvalidRequest, ""},
		{"temp table shadow", "CREATE TEMP TABLE " + victim + "(n int)", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"rule", "CREATE RULE drop_all AS ON INSERT TO " + victim + " DO INSTEAD NOTHING", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		// Only the parser stands here: a session lock taken would stay with
		// the pooled connection (migrate would wait on it).
		{"migration lock", "SELECT pg_advisory_lock(7378424937698517364)", tokens.ReasonInvalidRequest, ""},
		{"dblink", "CREATE EXTENSION dblink", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"read a file", "SELECT pg_read_file('/etc/passwd')", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"run a program", "COPY (SELECT 1) TO PROGRAM 'id'", tokens.ReasonInvalidRequest, tokens.ReasonStatementFailed},
		{"split with COMMIT", "-- x\rCOMMIT\nWORK", tokens.ReasonInvalidRequest, tokens.ReasonBackendUnavailable},
		{"delete the victim", "DELETE FROM " + victim + " WHERE false", "", ""}, // an ordinary statement, for contrast
	}
	for _, checked := range []bool{true, false} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/checked=%v", tt.name, checked), func(t *testing.T) {
				b := openBackend(t, Config{MaxConns: 1})
				b.uncheckedSQL = !checked
				want := tt.want
				if !checked {
					want = tt.unchecked
				}
				fence := unique("attacker")
				_, err := b.Exec(t.Context(), fence, 7, []Statement{{SQL: tt.sql}})
				if want == "" {
					if err != nil {
						t.Errorf("got %v, want it to run", err)
					}
				} else {
					refusal(t, err, want)
				}
				if got := highWater(t, other); got != 5 {
					t.Errorf("mark of %s: got %d, want 5", other, got)
				}
				// The next caller on the same connection.
				res, err := b.Exec(t.Context(), fence, 7, []Statement{
					{SQL: "INSERT INTO " + victim + " VALUES (2)"},
					{SQL: "SELECT count(*) FROM " + victim},
					{SQL: "DELETE FROM " + victim + " WHERE n = 2"},
				})
				if err != nil {
					t.Fatalf("next write: got %v, want nil", err)
				}
				if got := res[1].Rows[0][0]; got != int64(2) {
					t.Errorf("next write saw %v rows in %s, want 2 (the real table)", got, victim)
				}
			})
		}
	}
}

// TestResultLimits: a statement whose result is over the limits fails in
// the database, so the write rolls back: nothing of it is committed, and
// fencegate never holds the result.
func TestResultLimits(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table := unique("big")
	mustExec(t, db, "CREATE TABLE "+table+"(n int, pad text)")
	b := openBackend(t, Config{MaxResultRows: 100, MaxResultBytes: 64 << 10})
	tests := []struct {
		name string
		sql  string
		want string // in the refusal
	}{
		{"rows", "SELECT generate_series(1, 1000000)", "over the limit of 100 rows"},
		// Refused when the guard has read one row past the limit, well
		// before the write's time limit would cancel it.
		{"far more rows", "SELECT generate_series(1, 100000000), repeat('x', 100)", "over the limit of 100 rows"},
		{"returning rows", "INSERT INTO " + table + " SELECT g, 'x' FROM generate_series(1, 1000) g RETURNING n", "over the limit of 100 rows"},
		{"bytes", "INSERT INTO " + table + " SELECT g, repeat('x', 10000) FROM generate_series(1, 10) g RETURNING *", "bytes is over the limit"},
	}
	for _, tt := range tests {
		_, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
			{SQL: "INSERT INTO " + table + " VALUES (0, 'first')"},
			{SQL: tt.sql},
		})
		r := refusal(t, err, tokens.ReasonInvalidRequest)
		if !strings.Contains(r.Msg, tt.want) || r.Metadata["statement"] != "1" {
			t.Errorf("%s: got %v (metadata %v), want %q at statement 1", tt.name, err, r.Metadata, tt.want)
		}
		if got := count(t, db, table); got != 0 {
			t.Errorf("%s: rows committed: got %d, want 0", tt.name, got)
		}
	}
	// The limits are the write's: statements each within them add up.
	sixty := Statement{SQL: "SELECT generate_series(1, 60)"}
	_, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "INSERT INTO " + table + " VALUES (0, 'first')"}, sixty, sixty,
	})
	if r := refusal(t, err, tokens.ReasonInvalidRequest); !strings.Contains(r.Msg, "over the limit of 100 rows") || r.Metadata["statement"] != "2" {
		t.Errorf("two results of 60 rows: got %v (metadata %v), want the limit of 100 rows at statement 2", err, r.Metadata)
	}
	if got := count(t, db, table); got != 0 {
		t.Errorf("two results of 60 rows: rows committed: got %d, want 0", got)
	}
	// Within the limits, the statement answers as it would unwrapped.
	res, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "INSERT INTO " + table + " SELECT g, 'y' FROM generate_series(1, 3) g RETURNING n, pad"},
		{SQL: "SELECT 1 AS a, 2 AS a -- duplicate names\r"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res[0], (Result{RowsAffected: 3, Columns: []string{"n", "pad"}, Rows: [][]any{{int32(1), "y"}, {int32(2), "y"}, {int32(3), "y"}}}); !reflect.DeepEqual(got, want) {
		t.Errorf("RETURNING within the limits: got %+v, want %+v", got, want)
	}
	if got := res[1].Columns; !slices.Equal(got, []string{"a", "a"}) {
		t.Errorf("columns: got %v, want [a a]", got)
	}
}

// TestHugeServerErrorIsClipped: PostgreSQL quotes the offending value in
// some errors, so a statement can make the server's error as large as it
// likes. The refusal, returned to the caller and logged, stays small.
func TestHugeServerErrorIsClipped(t *testing.T) {
	t.Parallel()
	_, err := backend.Exec(t.Context(), unique("fence"), 1, []Statement{
		{SQL: "SELECT repeat('x', 10000000)::int"},
	})
	r := refusal(t, err, tokens.ReasonStatementFailed)
	if got := len(err.Error()); got > 4<<10 {
		t.Errorf("refusal is %d bytes, want at most 4 KiB", got)
	}
	if r.Metadata["sqlstate"] != "22P02" {
		t.Errorf("sqlstate: got %q, want 22P02", r.Metadata["sqlstate"])
	}
}
