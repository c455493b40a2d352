package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/election/freeport"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
	redisthrow "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// pgTermEnv is fencegate serving without etcd, its fences jobs* routed to
// postgres-term, over HTTP and the pgwire listener.
type pgTermEnv struct {
	pg       *throwaway.Server
	admin    *pgx.Conn
	httpAddr string
	pgAddr   string
	log      *syncBuffer
}

func newPgTermEnv(t *testing.T) *pgTermEnv {
	t.Helper()
	ctx := t.Context()
	pg, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	rd, err := redisthrow.Start(ctx, redisthrow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	dsn, err := pg.RuntimeRole(ctx, "gw")
	if err != nil {
		t.Fatal(err)
	}
	// The PostgreSQL listener's clients log in as app, with no fencegate role.
	if _, err := pg.ListenerRole(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.WithoutCancel(t.Context())) })
	if _, err := admin.Exec(ctx, `CREATE TABLE leadership_term (name text PRIMARY KEY, term bigint NOT NULL);
GRANT SELECT, UPDATE (term) ON leadership_term TO fencegate_owner;
CREATE TABLE jobs_done (v text);
GRANT SELECT, INSERT ON jobs_done TO gw, app`); err != nil {
		t.Fatal(err)
	}
	e := &pgTermEnv{pg: pg, admin: admin, httpAddr: freeport.Addr(t), pgAddr: freeport.Addr(t), log: &syncBuffer{}}
	sctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	args := []string{
		"serve", "--etcd-endpoints=", "--term-sources=jobs*=postgres-term", "--postgres-dsn=" + dsn,
		"--redis-addr=" + rd.Addr(), "--grpc-addr=127.0.0.1:0", "--http-addr=" + e.httpAddr, "--pg-listen-addr=" + e.pgAddr,
		"--postgres-term-poll=50ms",
	}
	go func() { errc <- run(sctx, args, io.Discard, e.log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(e.log.String(), "fencegate serving"); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-errc:
			t.Fatalf("serve: %v\n%s", err, e.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start\n%s", e.log.String())
		}
	}
	return e
}

// lead is the seed worker: a session of its own wins the advisory lock of
// election name and raises its term. Closing the session ends the term.
func (e *pgTermEnv) lead(t *testing.T, name string) (*pgx.Conn, uint64) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), e.pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.WithoutCancel(t.Context())) })
	var won bool
	if err := conn.QueryRow(t.Context(), "SELECT pg_try_advisory_lock(hashtext($1))", name).Scan(&won); err != nil || !won {
		t.Fatalf("advisory lock of %s: got %v, %v; want it won", name, won, err)
	}
	var term uint64
	if err := conn.QueryRow(t.Context(), `INSERT INTO leadership_term(name, term) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET term = leadership_term.term + 1 RETURNING term`, name).Scan(&term); err != nil {
		t.Fatal(err)
	}
	return conn, term
}

// resign ends the leader's session and waits until the server let go of
// its lock.
func (e *pgTermEnv) resign(t *testing.T, conn *pgx.Conn, name string) {
	t.Helper()
	_ = conn.Close(t.Context())
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := e.admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
AND objid = (hashtext($1)::bigint & 4294967295)::oid`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatalf("lock of %s still held", name)
}

// httpWrite writes v through POST /v1/fences/{fence}/sql and returns the
// refusal's reason ("" when accepted).
func (e *pgTermEnv) httpWrite(t *testing.T, fence string, tok uint64, v string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", "http://"+e.httpAddr+"/v1/fences/"+fence+"/sql",
		strings.NewReader(`{"statements":[{"sql":"INSERT INTO jobs_done VALUES ($1)","params":["`+v+`"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Fencing-Token", fmt.Sprint(tok))
	return e.do(t, req)
}

func (e *pgTermEnv) do(t *testing.T, req *http.Request) string {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	var st struct {
		Message string `json:"message"`
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if err := json.Unmarshal(body, &st); err != nil || len(st.Details) == 0 {
		t.Fatalf("refusal body %s: %v", body, err)
	}
	return st.Details[0].Reason + ": " + st.Message
}

// pgWrite writes v through the pgwire listener and returns the refusal's
// SQLSTATE and message ("" when accepted).
func (e *pgTermEnv) pgWrite(t *testing.T, fence string, tok uint64, v string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&fencegate.fence=%s&fencegate.token=%d", e.pgAddr, fence, tok))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	// The extended protocol (pgx's default) and the simple one.
	_, err = conn.Exec(t.Context(), "INSERT INTO jobs_done VALUES ($1)", v)
	_, serr := conn.Exec(t.Context(), "INSERT INTO jobs_done VALUES ('"+v+"-simple')", pgx.QueryExecModeSimpleProtocol)
	got, sgot := pgRefusal(err), pgRefusal(serr)
	if got != sgot {
		t.Errorf("extended protocol: %q; simple: %q; want the same", got, sgot)
	}
	return got
}

func pgRefusal(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code + " " + pe.Message
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func (e *pgTermEnv) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(t.Context(), "SELECT count(*) FROM jobs_done").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestServePostgresTerm: fencegate without etcd, a fence whose terms are
// the seed worker's advisory lock and term row. Through HTTP and the
// pgwire listener: the leader's token is accepted; a zombie's (a new
// leader raised the term) is STALE_TOKEN; the term of a leader gone with
// no new one is TERM_ENDED; a token above the term is UNKNOWN_TERM; and
// nothing is stored for any refusal.
func TestServePostgresTerm(t *testing.T) {
	e := newPgTermEnv(t)
	if log := e.log.String(); !strings.Contains(log, "running without etcd") {
		t.Errorf("start line does not say fencegate runs without etcd:\n%s", log)
	}
	check := func(t *testing.T, fence string, tok uint64, wantHTTP, wantPg string) {
		t.Helper()
		before := e.rows(t)
		got := e.httpWrite(t, fence, tok, "http")
		if !strings.HasPrefix(got, wantHTTP) || (wantHTTP == "" && got != "") {
			t.Errorf("HTTP token %d: got %q, want %q", tok, got, wantHTTP)
		}
		gotPg := e.pgWrite(t, fence, tok, "pg")
		if !strings.HasPrefix(gotPg, wantPg) || (wantPg == "" && gotPg != "") {
			t.Errorf("pgwire token %d: got %q, want %q", tok, gotPg, wantPg)
		}
		want := before
		if wantHTTP == "" {
			want += 3 // HTTP, then pgwire's two
		}
		if got := e.rows(t); got != want {
			t.Errorf("rows: got %d, want %d", got, want)
		}
	}

	leader, term := e.lead(t, "jobs")
	t.Run("current term accepted", func(t *testing.T) { check(t, "jobs", term, "", "") })
	t.Run("forged token above the term", func(t *testing.T) {
		check(t, "jobs", term+1, "UNKNOWN_TERM: fencegate: UNKNOWN_TERM: no leader of election \"jobs\" ever held term", "FG003 fencegate: UNKNOWN_TERM: ")
	})
	e.resign(t, leader, "jobs")
	t.Run("ended term", func(t *testing.T) {
		check(t, "jobs", term, "TERM_ENDED: fencegate: TERM_ENDED: term "+fmt.Sprint(term)+" of election \"jobs\" is over", "FG002 fencegate: TERM_ENDED: ")
	})
	_, next := e.lead(t, "jobs")
	// Until the source's poll (50ms) sees the new leader, the gateway's
	// memory still says the term ended: wait for it, so the zombie meets
	// the new term.
	time.Sleep(500 * time.Millisecond)
	t.Run("zombie of the earlier term", func(t *testing.T) {
		check(t, "jobs", term, "STALE_TOKEN: fencegate: STALE_TOKEN: token "+fmt.Sprint(term)+" is below", "FG001 fencegate: STALE_TOKEN: ")
	})
	t.Run("new leader accepted", func(t *testing.T) { check(t, "jobs", next, "", "") })
	t.Run("fence no route takes, without etcd", func(t *testing.T) {
		check(t, "other", 1, "UNKNOWN_TERM: ", "FG003 fencegate: UNKNOWN_TERM: ")
	})
	t.Run("redis write to a postgres-term fence", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), "POST", "http://"+e.httpAddr+"/v1/fences/jobs/redis",
			strings.NewReader(`{"commands":[["SET","{jobs}:k","v"]]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Fencing-Token", fmt.Sprint(next))
		if got, want := e.do(t, req), "INVALID_REQUEST: fencegate: INVALID_REQUEST: fence jobs takes its terms from postgres-term"; !strings.HasPrefix(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}
