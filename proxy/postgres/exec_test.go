package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

func execOK(t *testing.T, fence string, tok tokens.Token, stmts ...Statement) []Result {
	t.Helper()
	res, err := backend.Exec(t.Context(), fence, tok, stmts)
	if err != nil {
		t.Fatalf("Exec(%s, %d): got %v, want nil", fence, tok, err)
	}
	return res
}

func refusal(t *testing.T, err error, want tokens.Reason) *tokens.RefusalError {
	t.Helper()
	r, ok := tokens.AsRefusal(err)
	if !ok {
		t.Fatalf("error: got %v (%T), want a *tokens.RefusalError %s", err, err, want)
	}
	if r.Reason != want {
		t.Fatalf("reason: got %s (%v), want %s", r.Reason, err, want)
	}
	return r
}

func highWater(t *testing.T, fence string) tokens.Token {
	t.Helper()
	hw, ok, err := backend.HighWater(t.Context(), fence)
	if err != nil {
		t.Fatalf("HighWater(%s): %v", fence, err)
	}
	if !ok {
		return 0
	}
	return hw
}

func TestExecAcceptsAndRaisesHighWater(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table, fence := unique("accept"), unique("fence")
	mustExec(t, db, "CREATE TABLE "+table+"(v int)")
	steps := []struct {
		token  tokens.Token
		wantHW tokens.Token
	}{
		{5, 5},
		{7, 7},
		{7, 7}, // equal: the same leader writes again
		{1 << 40, 1 << 40},
	}
	for i, st := range steps {
		execOK(t, fence, st.token, Statement{SQL: "INSERT INTO " + table + " VALUES ($1)", Params: []any{float64(i)}})
		if got := highWater(t, fence); got != st.wantHW {
			t.Errorf("step %d: high-water got %d, want %d", i, got, st.wantHW)
		}
	}
	if got := count(t, db, table); got != len(steps) {
		t.Errorf("rows: got %d, want %d", got, len(steps))
	}
	fences, err := backend.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range fences {
		if f.Name == fence {
			found = true
			if f.HighWater != 1<<40 || time.Since(f.UpdatedAt) > time.Minute {
				t.Errorf("Fences: got %+v, want high-water %d updated just now", f, 1<<40)
			}
		}
	}
	if !found {
		t.Errorf("Fences: got no %s in %v", fence, fences)
	}
	if _, ok, err := backend.HighWater(t.Context(), unique("never")); ok || err != nil {
		t.Errorf("HighWater of unknown fence: got ok=%v err=%v, want false, nil", ok, err)
	}
}

func TestExecStaleTokenWritesNothing(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table, fence := unique("stale"), unique("fence")
	mustExec(t, db, "CREATE TABLE "+table+"(v int)")
	execOK(t, fence, 10, Statement{SQL: "INSERT INTO " + table + " VALUES (1)"})
	for _, tok := range []tokens.Token{9, 1} {
		_, err := backend.Exec(t.Context(), fence, tok, []Statement{{SQL: "INSERT INTO " + table + " VALUES (2)"}})
		r := refusal(t, err, tokens.ReasonStaleToken)
		if r.HighWater != 10 || r.Fence != fence || r.Token != tok {
			t.Errorf("refusal: got fence %s token %d high-water %d, want %s %d 10", r.Fence, r.Token, r.HighWater, fence, tok)
		}
		if !errors.Is(err, tokens.ErrStale) {
			t.Errorf("errors.Is(%v, ErrStale): got false, want true", err)
		}
	}
	if got := count(t, db, table); got != 1 {
		t.Errorf("rows: got %d, want 1", got)
	}
	if got := highWater(t, fence); got != 10 {
		t.Errorf("high-water: got %d, want 10", got)
	}
}

func TestExecAllOrNothing(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table, fence := unique("atomic"), unique("fence")
	mustExec(t, db, "CREATE TABLE "+table+"(id int PRIMARY KEY)")
	execOK(t, fence, 3, Statement{SQL: "INSERT INTO " + table + " VALUES (0)"})
	tests := []struct {
		name      string
		third     string
		wantState string
	}{
		{"unique violation", "INSERT INTO " + table + " VALUES (0)", "23505"},
		{"division by zero", "SELECT 1/0", "22012"},
		{"syntax error", "INSRT INTO " + table + " VALUES (9)", ""}, // refused before sending
		{"undefined table (fails while preparing)", "INSERT INTO no_such_table VALUES (9)", "42P01"},
		{"two commands in one string", "INSERT INTO " + table + " VALUES (9); COMMIT", ""},
		{"vacuum in the transaction", "VACUUM " + table, ""}, // refused before sending
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := tokens.Token(100 + i) // would raise the fence
			stmts := []Statement{
				{SQL: "INSERT INTO " + table + " VALUES ($1)", Params: []any{float64(10 + 2*i)}},
				{SQL: "INSERT INTO " + table + " VALUES ($1)", Params: []any{float64(11 + 2*i)}},
				{SQL: tt.third},
			}
			_, err := backend.Exec(t.Context(), fence, tok, stmts)
			if tt.wantState == "" {
				refusal(t, err, tokens.ReasonInvalidRequest)
			} else {
				r := refusal(t, err, tokens.ReasonStatementFailed)
				if got := r.Metadata["sqlstate"]; got != tt.wantState {
					t.Errorf("sqlstate: got %q, want %q (%v)", got, tt.wantState, err)
				}
				if got := r.Metadata["statement"]; got != "2" {
					t.Errorf("statement: got %q, want %q", got, "2")
				}
				if r.Msg == "" || r.Fence != fence || r.Token != tok {
					t.Errorf("refusal: got %+v, want message, fence and token set", r)
				}
				// The server's message once, where, and its SQLSTATE:
				// "statement 2: division by zero (SQLSTATE 22012)".
				msg := err.Error()
				if !strings.HasPrefix(msg, "fencegate: STATEMENT_FAILED: statement 2: ") || !strings.Contains(msg, "(SQLSTATE "+tt.wantState+")") ||
					strings.Count(msg, "SQLSTATE") != 1 || strings.Contains(msg, "ERROR: ") {
					t.Errorf("message %q: want the server's message once, after \"statement 2: \", with its SQLSTATE", msg)
				}
			}
			if got := count(t, db, table); got != 1 {
				t.Errorf("rows: got %d, want 1 (nothing of the failed write)", got)
			}
			if got := highWater(t, fence); got != 3 {
				t.Errorf("high-water: got %d, want 3 (not raised)", got)
			}
		})
	}
}

func TestExecReturnsRows(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table := unique("counters")
	mustExec(t, db, "CREATE TABLE "+table+"(name text PRIMARY KEY, n int NOT NULL)")
	mustExec(t, db, "INSERT INTO "+table+" VALUES ('jobs', 17), ('other', 1)")
	res := execOK(t, unique("fence"), 1,
		Statement{SQL: "INSERT INTO " + table + " VALUES ($1, $2)", Params: []any{"new", float64(7)}},
		Statement{SQL: "UPDATE " + table + " SET n = n + 1 WHERE name = $1 RETURNING n", Params: []any{"jobs"}},
		Statement{SQL: "SELECT name, n FROM " + table + " WHERE n > $1 ORDER BY name", Params: []any{float64(100)}},
		Statement{SQL: "SELECT name, n FROM " + table + " ORDER BY name"},
	)
	want := []Result{
		{RowsAffected: 1},
		{RowsAffected: 1, Columns: []string{"n"}, Rows: [][]any{{int32(18)}}},
		{RowsAffected: 0, Columns: []string{"name", "n"}, Rows: [][]any{}},
		{RowsAffected: 3, Columns: []string{"name", "n"}, Rows: [][]any{{"jobs", int32(18)}, {"new", int32(7)}, {"other", int32(1)}}},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("results:\n got %#v\nwant %#v", res, want)
	}
}

func TestExecParamTypes(t *testing.T) {
	t.Parallel()
	db := admin(t)
	table := unique("types")
	mustExec(t, db, `CREATE TABLE `+table+`(
		i4 int4, i8 int8, num numeric, txt text, b bool, j jsonb, ts timestamptz,
		f8 float8, u uuid, d date, by bytea)`)
	// Parameters as the HTTP layer decodes them from JSON.
	var params []any
	if err := json.Unmarshal([]byte(`[7, 9007199254740993, 12.25, "hello", true,
		{"a": [1, "x"], "b": null}, "2024-01-02T03:04:05.5Z", 2.5,
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "2024-02-29", "\\x0102ff"]`), &params); err != nil {
		t.Fatal(err)
	}
	res := execOK(t, unique("fence"), 1, Statement{
		SQL:    "INSERT INTO " + table + " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING *, i8 + 0 AS big, num * 2 AS num2",
		Params: params,
	})
	got := res[0].Rows[0]
	// 9007199254740993 is not exactly representable in a float64: JSON
	// numbers beyond 2^53 arrive rounded (to 2^53, still exact).
	want := []any{
		int32(7), int64(9007199254740992), "12.25", "hello", true,
		map[string]any{"a": []any{float64(1), "x"}, "b": nil},
		"2024-01-02T03:04:05.5Z", 2.5,
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "2024-02-29", "AQL/", int64(9007199254740992), "24.50",
	}
	if len(got) != len(want) {
		t.Fatalf("columns: got %d %v, want %d", len(got), res[0].Columns, len(want))
	}
	for i := range want {
		g := got[i]
		if ts, ok := g.(string); ok && res[0].Columns[i] == "ts" {
			// Rendered in the session's time zone; compare instants.
			p, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || !p.Equal(time.Date(2024, 1, 2, 3, 4, 5, 5e8, time.UTC)) {
				t.Errorf("column ts: got %q, want 2024-01-02T03:04:05.5Z", ts)
			}
			continue
		}
		if !reflect.DeepEqual(g, want[i]) {
			t.Errorf("column %s: got %#v (%T), want %#v (%T)", res[0].Columns[i], g, g, want[i], want[i])
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Errorf("json.Marshal(results): got %v, want nil", err)
	}

	// Small integers go out as numbers, strings parse into numbers, and
	// integers beyond 2^53 come back as strings.
	res = execOK(t, unique("fence"), 1, Statement{
		SQL:    "SELECT $1::int8 AS small, $2::int4 AS from_string, $3::numeric AS n, $4::text AS s, $5::int8 AS big, $6::float8 AS f",
		Params: []any{float64(42), "15", float64(0.5), "x", "9007199254740993", float64(3)},
	})
	wantRow := []any{int64(42), int32(15), "0.5", "x", "9007199254740993", float64(3)}
	if !reflect.DeepEqual(res[0].Rows[0], wantRow) {
		t.Errorf("row: got %#v, want %#v", res[0].Rows[0], wantRow)
	}
}

func TestExecRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	fence := unique("fence")
	tests := []struct {
		name  string
		fence string
		token tokens.Token
		stmts []Statement
	}{
		{"no statements", fence, 1, nil},
		{"empty fence", "", 1, []Statement{{SQL: "SELECT 1"}}},
		{"zero token", fence, 0, []Statement{{SQL: "SELECT 1"}}},
		{"token beyond bigint", fence, 1 << 63, []Statement{{SQL: "SELECT 1"}}},
		{"commit", fence, 1, []Statement{{SQL: "SELECT 1"}, {SQL: " /* x */ commit"}}},
		{"call", fence, 1, []Statement{{SQL: "CALL p()"}}},
		{"touches fencegate", fence, 1, []Statement{{SQL: `UPDATE "fencegate" . fences SET token = 1`}}},
	}
	for _, tt := range tests {
		_, err := backend.Exec(t.Context(), tt.fence, tt.token, tt.stmts)
		r := refusal(t, err, tokens.ReasonInvalidRequest)
		if r.Fence != tt.fence || r.Token != tt.token {
			t.Errorf("%s: got fence %q token %d, want %q %d", tt.name, r.Fence, r.Token, tt.fence, tt.token)
		}
	}
	if _, ok, _ := backend.HighWater(t.Context(), fence); ok {
		t.Errorf("fence %s: got created, want nothing sent", fence)
	}
}

// TestConcurrentWritersNeverRegress is the safety property: however writers
// with different tokens interleave, the committed writes of a fence are in
// non-decreasing token order.
func TestConcurrentWritersNeverRegress(t *testing.T) {
	t.Parallel()
	// Rounds make a lost race likely to show; each is ~0.1s.
	for range 5 {
		ledgerRound(t, backend)
	}
}

func ledgerRound(t *testing.T, backend *Backend) {
	t.Helper()
	db := admin(t)
	table, fence := unique("ledger"), unique("fence")
	mustExec(t, db, "CREATE TABLE "+table+"(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, token bigint NOT NULL)")
	const writers, writes = 8, 40
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted int
		failures []error
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for j := range writes {
				// Rising with overlap, as terms do when leaders change
				// while old ones still write: many writes land close to the
				// high-water mark, on both sides of it.
				tok := tokens.Token(1 + 4*j + rng.IntN(20))
				_, err := backend.Exec(t.Context(), fence, tok, []Statement{
					{SQL: "INSERT INTO " + table + "(token) VALUES ($1)", Params: []any{float64(tok)}},
				})
				mu.Lock()
				switch r, _ := tokens.AsRefusal(err); {
				case err == nil:
					accepted++
				case r != nil && r.Reason == tokens.ReasonStaleToken && r.HighWater > tok:
				default:
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range failures {
		t.Errorf("Exec: got %v, want nil or STALE_TOKEN above the token", err)
	}
	rows, err := db.Query(t.Context(), "SELECT token FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var prev, n int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if tok < prev {
			t.Errorf("ledger row %d: token %d committed after token %d", n, tok, prev)
		}
		prev = tok
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if int(n) != accepted {
		t.Errorf("ledger rows: got %d, want %d accepted writes", n, accepted)
	}
	if hw := highWater(t, fence); int64(hw) != prev {
		t.Errorf("high-water: got %d, want the last committed token %d", hw, prev)
	}
}

func TestExecBackendUnavailable(t *testing.T) {
	t.Parallel()
	b, err := Open(t.Context(), runtimeDSN, Config{ApplicationName: "down-test", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	db := admin(t)
	stmt := []Statement{{SQL: "SELECT 1"}}

	// The server ends our sessions: the error it sends says the batch
	// was not run.
	mustExec(t, db, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'down-test'")
	_, err = b.Exec(t.Context(), unique("fence"), 1, stmt)
	r := refusal(t, err, tokens.ReasonBackendUnavailable)
	if _, ok := r.Metadata["outcome"]; ok {
		t.Errorf("terminated session: got outcome %q, want none", r.Metadata["outcome"])
	}

	// Deadline while the batch runs: it may still commit.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = b.Exec(ctx, unique("fence"), 1, []Statement{{SQL: "SELECT pg_sleep(1)"}})
	r = refusal(t, err, tokens.ReasonBackendUnavailable)
	if got := r.Metadata["outcome"]; got != "unknown" {
		t.Errorf("deadline after send: got outcome %q, want unknown (%v)", got, err)
	}

	// Statement timeout: the server rolled back.
	short, err := Open(t.Context(), runtimeDSN, Config{StatementTimeout: 50 * time.Millisecond, WriteTimeout: 5 * time.Second, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	_, err = short.Exec(t.Context(), unique("fence"), 1, []Statement{{SQL: "SELECT pg_sleep(1)"}})
	r = refusal(t, err, tokens.ReasonBackendUnavailable)
	if got, ok := r.Metadata["outcome"]; ok || r.Metadata["sqlstate"] != "57014" {
		t.Errorf("statement timeout: got outcome %q sqlstate %q, want none and 57014", got, r.Metadata["sqlstate"])
	}

	// Nothing listens: the connection cannot even be opened.
	pc := b.pool.Config()
	pc.ConnConfig.Port = uint16(closedPort(t))
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	down := &Backend{cfg: b.cfg, sql: b.sql, pool: pool, host: b.host}
	down.co = coalesce.New(1, maxBatch, down.runBatch)
	defer down.Close()
	_, err = down.Exec(t.Context(), unique("fence"), 1, stmt)
	r = refusal(t, err, tokens.ReasonBackendUnavailable)
	if _, ok := r.Metadata["outcome"]; ok {
		t.Errorf("connect refused: got outcome %q, want none", r.Metadata["outcome"])
	}
}

// TestExecAfterRestart: connections the server dropped while idle in the
// pool cost at most one refused write, and that one says nothing was
// written.
func TestExecAfterRestart(t *testing.T) {
	t.Parallel()
	srv, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	}()
	dsn, err := srv.RuntimeRole(t.Context(), "fencegate_test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), dsn, Config{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Fill the pool: four writes at once hold four connections.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{{SQL: "SELECT pg_sleep(0.1)"}}); err != nil {
				t.Errorf("Exec: %v", err)
			}
		})
	}
	wg.Wait()
	if got := b.pool.Stat().IdleConns(); got != 4 {
		t.Fatalf("idle connections: got %d, want 4", got)
	}

	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	var failed int
	for i := range 6 {
		_, err := b.Exec(t.Context(), unique("fence"), 1, []Statement{{SQL: "SELECT 1"}})
		if err == nil {
			continue
		}
		failed++
		r := refusal(t, err, tokens.ReasonBackendUnavailable)
		if got, ok := r.Metadata["outcome"]; ok {
			t.Errorf("write %d on a dropped connection: got outcome %q, want none (%v)", i, got, err)
		}
	}
	if failed > 1 {
		t.Errorf("refused writes after restart: got %d, want at most 1", failed)
	}
}
