package pgterm_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/pgterm"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// Red-team tests of the postgres-term source, end to end through the write
// pipeline (proxy.Gateway) with the PostgreSQL backend's in-transaction
// term check (fencegate.advance_term), wired as cmd/fencegate serve wires
// them: fences rt* are postgres-term, mono* monotonic.

var rtRuns atomic.Int64

// rtName is a fence name of its own per call (the term table and the
// fences table outlive a run: go test -count=N).
func rtName(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, time.Now().UnixNano()%1e9, rtRuns.Add(1))
}

type rtEnv struct {
	gw    *proxy.Gateway
	src   *pgterm.Source
	admin *pgx.Conn
}

func rtSetup(t *testing.T) *rtEnv {
	t.Helper()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, server.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.WithoutCancel(ctx)) })
	if _, err := admin.Exec(ctx, `CREATE TABLE IF NOT EXISTS rt_writes (fence text, token bigint);
CREATE TABLE IF NOT EXISTS rt_blocker (id int PRIMARY KEY, v int);
INSERT INTO rt_blocker VALUES (1, 0) ON CONFLICT DO NOTHING;
GRANT SELECT, INSERT, UPDATE ON rt_writes, rt_blocker TO fencegate_test`); err != nil {
		t.Fatal(err)
	}
	// No poll loop: memory learns from Verify only, so what is accepted
	// below is the backend's check and the verify path, not a timely poll.
	src := open(t, pgterm.Config{Poll: time.Hour})
	routes, err := election.ParseRoutes("rt*=postgres-term,mono*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	router, err := election.NewRouter(nil, routes, map[string]election.Source{election.SourcePostgresTerm: src})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := postgres.NewTermCheck(src.Table(), src.LockKey())
	if err != nil {
		t.Fatal(err)
	}
	pg, err := postgres.Open(ctx, runtimeDSN, postgres.Config{TermCheck: func(fence string) (postgres.TermCheck, bool) {
		if router.KindOf(fence) == election.SourcePostgresTerm {
			return tc, true
		}
		return postgres.TermCheck{}, false
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{Terms: router, Postgres: pg})
	if err != nil {
		t.Fatal(err)
	}
	return &rtEnv{gw: gw, src: src, admin: admin}
}

// write is a fenced insert of (fence, token) into rt_writes; it returns
// the refusal reason, "" when accepted.
func (e *rtEnv) write(t *testing.T, fence string, token int64) tokens.Reason {
	t.Helper()
	_, _, err := e.gw.Exec(t.Context(), fence, fmt.Sprint(token), []postgres.Statement{
		{SQL: "INSERT INTO rt_writes VALUES ($1, $2)", Params: []any{fence, token}},
	})
	if err == nil {
		return ""
	}
	r, ok := tokens.AsRefusal(err)
	if !ok {
		t.Fatalf("write %s/%d: %v is not a refusal", fence, token, err)
	}
	return r.Reason
}

// stored counts the rows token wrote for fence.
func (e *rtEnv) stored(t *testing.T, fence string, token int64) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(t.Context(), "SELECT count(*) FROM rt_writes WHERE fence = $1 AND token = $2", fence, token).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// lockHolders counts the sessions holding name's hashtext advisory lock.
func (e *rtEnv) lockHolders(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
AND classid = ((hashtext($1)::bigint >> 32) & 4294967295)::oid AND objid = (hashtext($1)::bigint & 4294967295)::oid`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *rtEnv) waitHolders(t *testing.T, name string, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); e.lockHolders(t, name) != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("advisory lock of %q: want %d holders", name, want)
		}
	}
}

// The term row deleted and counted again from 1 (tokens going backwards):
// the old leader's higher token is refused (above the row: UNKNOWN_TERM),
// nothing of it lands.
func TestRedTeamPgTermRowReset(t *testing.T) {
	e := rtSetup(t)
	fence := rtName("rtreset")
	if _, err := e.admin.Exec(t.Context(), "INSERT INTO leadership_term VALUES ($1, 4)", fence); err != nil {
		t.Fatal(err)
	}
	a, term := campaign(t, fence, "hashtext")
	if term != 5 {
		t.Fatalf("a's term: got %d, want 5", term)
	}
	if r := e.write(t, fence, term); r != "" {
		t.Fatalf("a's write: %s", r)
	}
	_ = a.Close(t.Context())
	e.waitHolders(t, fence, 0)
	if _, err := e.admin.Exec(t.Context(), "DELETE FROM leadership_term WHERE name = $1", fence); err != nil {
		t.Fatal(err)
	}
	_, next := campaign(t, fence, "hashtext")
	if next != 1 {
		t.Fatalf("b's term: got %d, want 1", next)
	}
	before := e.stored(t, fence, term)
	if r := e.write(t, fence, term); r == "" || e.stored(t, fence, term) != before {
		t.Errorf("a's token %d after the row was reset under b (term 1): accepted; want refused", term)
	}
	// b's lower token cannot pass the high-water mark: liveness, not
	// safety; logged only.
	t.Logf("b's write with term 1 under high-water 5: %q", e.write(t, fence, next))
}

// Unknown, forged and edge tokens on a postgres-term fence with a live
// leader: none is accepted, none stores anything, and none spoils the
// leader's next write.
func TestRedTeamPgTermEdgeTokens(t *testing.T) {
	e := rtSetup(t)
	fence := rtName("rtedge")
	_, term := campaign(t, fence, "hashtext")
	for _, raw := range []string{
		"0", "-1", "+1", "01", fmt.Sprint(term + 1), fmt.Sprint(term + 1000),
		"9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616", " 1", "1 ",
	} {
		_, _, err := e.gw.Exec(t.Context(), fence, raw, []postgres.Statement{
			{SQL: "INSERT INTO rt_writes VALUES ($1, -1)", Params: []any{fence}},
		})
		if err == nil {
			t.Errorf("token %q accepted", raw)
		}
	}
	if n := e.stored(t, fence, -1); n != 0 {
		t.Errorf("%d forged rows stored", n)
	}
	if r := e.write(t, fence, term); r != "" {
		t.Errorf("leader after the forgeries: refused %s", r)
	}
}
