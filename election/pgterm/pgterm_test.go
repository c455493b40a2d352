package pgterm_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/pgterm"
	"github.com/fencegate/fencegate/proxy/postgres/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

var (
	server     *throwaway.Server
	runtimeDSN string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx := context.Background()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	server = srv
	if runtimeDSN, err = srv.RuntimeRole(ctx, "fencegate_test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = conn.Exec(ctx, `CREATE TABLE leadership_term (name text PRIMARY KEY, term bigint NOT NULL);
GRANT SELECT, UPDATE (term) ON leadership_term TO fencegate_owner;
CREATE SCHEMA elect; CREATE TABLE elect."Terms" (name text PRIMARY KEY, term bigint NOT NULL);
GRANT USAGE ON SCHEMA elect TO fencegate_test;
GRANT SELECT ON elect."Terms" TO fencegate_test;
CREATE TABLE hidden (name text PRIMARY KEY, term bigint NOT NULL);
GRANT SELECT, UPDATE (term) ON hidden TO fencegate_owner;
REVOKE ALL ON hidden FROM fencegate_test`)
	_ = conn.Close(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

func open(t *testing.T, cfg pgterm.Config) *pgterm.Source {
	t.Helper()
	cfg.DSN = runtimeDSN
	s, err := pgterm.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// campaign is the seed worker: its own session, the advisory lock of name
// derived by key, then the term raised. 0 when the lock is taken.
func campaign(t *testing.T, name, key string) (*pgx.Conn, int64) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), server.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(t.Context())) })
	lock := "hashtext($1)"
	if key == "hashtextextended" {
		lock = "hashtextextended($1, 0)"
	}
	var won bool
	if err := conn.QueryRow(t.Context(), "SELECT pg_try_advisory_lock("+lock+")", name).Scan(&won); err != nil {
		t.Fatal(err)
	}
	if !won {
		return conn, 0
	}
	var term int64
	if err := conn.QueryRow(t.Context(), `INSERT INTO leadership_term(name, term) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET term = leadership_term.term + 1 RETURNING term`, name).Scan(&term); err != nil {
		t.Fatal(err)
	}
	return conn, term
}

// eventually polls until the source's term of name satisfies ok.
func eventually(t *testing.T, s *pgterm.Source, name string, ok func(election.Term) bool) election.Term {
	t.Helper()
	var got election.Term
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := s.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got = s.Term(name); ok(got) {
			return got
		}
	}
	t.Fatalf("term of %q: got %+v", name, got)
	return got
}

var sourceRuns atomic.Int64

func TestSource(t *testing.T) {
	for _, key := range []string{"hashtext", "hashtextextended"} {
		t.Run(key, func(t *testing.T) {
			s := open(t, pgterm.Config{LockKey: key})
			// Its own name in each run: the term table keeps earlier
			// runs' rows (go test -count=N).
			name := fmt.Sprintf("jobs-%s-%d", key, sourceRuns.Add(1))
			if got := s.Term(name); got.Rev != 0 || got.Last != 0 {
				t.Fatalf("unseen term: got %+v, want zero", got)
			}
			// Verify before any row: no term was ever held.
			if _, held, err := s.Verify(t.Context(), name, 1); err != nil || held {
				t.Fatalf("verify without a row: got held %v, %v; want false, nil", held, err)
			}
			first, term := campaign(t, name, key)
			// Neither asking nor a Verify that found no row follows a
			// name: a poll does not read it.
			if err := s.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := s.Term(name); got.Rev != 0 || got.Last != 0 {
				t.Fatalf("term of a name never found: got %+v, want zero", got)
			}
			// The leader's first write: above memory, verified, and
			// followed from then on.
			if _, held, err := s.Verify(t.Context(), name, term); err != nil || !held {
				t.Fatalf("verify the leader's %d: got held %v, %v; want true, nil", term, held, err)
			}
			got := eventually(t, s, name, func(tm election.Term) bool { return tm.Rev == term })
			if got.Last != term || tokens.Decide(tokens.Token(term), 0, got) != tokens.Accept {
				t.Errorf("leader's term: got %+v, want Rev=Last=%d, accepted", got, term)
			}
			// A forged token above the term: never held.
			vt, held, err := s.Verify(t.Context(), name, term+1)
			if err != nil || held || tokens.DecideVerified(tokens.Token(term+1), 0, vt, held) != tokens.Unknown {
				t.Errorf("forged %d: got %+v held %v, %v; want unknown", term+1, vt, held, err)
			}
			// The leader goes: the term is over.
			_ = first.Close(t.Context())
			got = eventually(t, s, name, func(tm election.Term) bool { return tm.Rev == 0 })
			if got.Last != term || tokens.Decide(tokens.Token(term), 0, got) != tokens.Ended {
				t.Errorf("after the leader went: got %+v, want Rev 0 Last %d, ended", got, term)
			}
			// A new leader: the old term is stale.
			_, next := campaign(t, name, key)
			got = eventually(t, s, name, func(tm election.Term) bool { return tm.Rev == next })
			if tokens.Decide(tokens.Token(term), 0, got) != tokens.Stale {
				t.Errorf("old term %d under %+v: want stale", term, got)
			}
			if got.Changes < 3 {
				t.Errorf("changes: got %d, want at least 3", got.Changes)
			}
			if ts := s.Terms(); len(ts) != 1 || ts[0].Election != name {
				t.Errorf("terms: got %+v, want %s only", ts, name)
			}
		})
	}
}

// A new leader is seen by Verify before any poll: a token above what is in
// memory is verified against the table.
func TestVerifyNewLeader(t *testing.T) {
	s := open(t, pgterm.Config{Poll: time.Hour})
	_, term := campaign(t, "verify-new", "hashtext")
	if got := s.Term("verify-new"); got.Rev != 0 {
		t.Fatalf("before verify: got %+v, want nothing known", got)
	}
	vt, held, err := s.Verify(t.Context(), "verify-new", term)
	if err != nil || !held || tokens.DecideVerified(tokens.Token(term), 0, vt, held) != tokens.Accept {
		t.Errorf("verify %d: got %+v held %v, %v; want accepted", term, vt, held, err)
	}
	if got := s.Term("verify-new"); got.Rev != term {
		t.Errorf("after verify: got %+v, want Rev %d", got, term)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  pgterm.Config
		want string
	}{
		{pgterm.Config{Table: "nope"}, `term table "nope" does not exist`},
		{pgterm.Config{Table: `elect."Terms"`}, `fencegate_owner may not read and lock the rows of elect."Terms": GRANT SELECT, UPDATE (term)`},
		{pgterm.Config{Table: "hidden"}, "fencegate's login may not read public.hidden: GRANT SELECT ON public.hidden TO"},
		{pgterm.Config{LockKey: "md5"}, `lock key derivation "md5"`},
		{pgterm.Config{Poll: time.Millisecond}, "poll interval"},
	} {
		tc.cfg.DSN = runtimeDSN
		s, err := pgterm.Open(t.Context(), tc.cfg)
		if err == nil {
			s.Close()
			t.Errorf("%+v: got no error, want %q", tc.cfg, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
	s := open(t, pgterm.Config{})
	if got, want := s.Table(), "public.leadership_term"; got != want {
		t.Errorf("table: got %q, want %q", got, want)
	}
}
