package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/tokens"
)

var (
	termOnce    sync.Once
	termBackend *Backend // fences "term_*" are postgres-term
	termErr     error
)

// openTermBackend returns a Backend whose fences named term_* are checked
// against public.leadership_term and hashtext advisory locks.
func openTermBackend(t *testing.T) *Backend {
	t.Helper()
	termOnce.Do(func() {
		// The backend is shared by the package's tests: it outlives this one.
		ctx := context.WithoutCancel(t.Context())
		conn, err := pgx.Connect(ctx, server.DSN())
		if err != nil {
			termErr = err
			return
		}
		defer conn.Close(ctx)
		if _, termErr = conn.Exec(ctx, `
CREATE TABLE IF NOT EXISTS public.leadership_term (name text PRIMARY KEY, term bigint NOT NULL);
GRANT SELECT, UPDATE (term) ON public.leadership_term TO fencegate_owner;
CREATE TABLE IF NOT EXISTS public.term_writes (v int)`); termErr != nil {
			return
		}
		tc, err := NewTermCheck("public.leadership_term", LockKeyHashtext)
		if err != nil {
			termErr = err
			return
		}
		termBackend, termErr = Open(ctx, runtimeDSN, Config{
			TermCheck: func(fence string) (TermCheck, bool) {
				if strings.HasPrefix(fence, "term_") {
					return tc, true
				}
				return TermCheck{}, false
			},
		})
	})
	if termErr != nil {
		t.Fatalf("term backend: %v", termErr)
	}
	return termBackend
}

// seedWorker campaigns for election name as the seed worker does, on a
// session of its own: the advisory lock, then the term raised. It returns
// the session (closing it ends the term) and the term, 0 when the lock is
// taken.
func seedWorker(t *testing.T, name string) (*pgx.Conn, int64) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), server.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(t.Context())) })
	var won bool
	if err := conn.QueryRow(t.Context(), "SELECT pg_try_advisory_lock(hashtext($1))", name).Scan(&won); err != nil {
		t.Fatalf("advisory lock: %v", err)
	}
	if !won {
		return conn, 0
	}
	var term int64
	if err := conn.QueryRow(t.Context(), raiseSQL, name).Scan(&term); err != nil {
		t.Fatalf("raise term: %v", err)
	}
	return conn, term
}

const raiseSQL = `INSERT INTO leadership_term(name, term) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET term = leadership_term.term + 1 RETURNING term`

func termWrite(t *testing.T, b *Backend, fence string, tok int64) error {
	t.Helper()
	_, err := b.Exec(t.Context(), fence, tokens.Token(tok), []Statement{{SQL: "INSERT INTO term_writes VALUES (1)"}})
	return err
}

func writesOf(t *testing.T) int { t.Helper(); return count(t, admin(t), "term_writes") }

func wantRefusal(t *testing.T, err error, reason tokens.Reason, msg string) {
	t.Helper()
	r, ok := tokens.AsRefusal(err)
	if !ok {
		t.Fatalf("got %v, want a %s refusal", err, reason)
	}
	if r.Reason != reason || !strings.Contains(r.Msg, msg) {
		t.Fatalf("got %s %q, want %s containing %q", r.Reason, r.Msg, reason, msg)
	}
}

func TestTermCheck(t *testing.T) {
	b := openTermBackend(t)
	for _, tc := range []struct {
		name   string
		run    func(t *testing.T, fence string) int64 // the token to write with
		reason tokens.Reason                          // "" for accepted
		msg    string
	}{
		{"current term accepted", func(t *testing.T, fence string) int64 {
			t.Helper()
			_, term := seedWorker(t, fence)
			return term
		}, "", ""},
		{"zombie of an earlier term", func(t *testing.T, fence string) int64 {
			t.Helper()
			old, term := seedWorker(t, fence)
			_ = old.Close(t.Context())
			// Close does not wait for the server's backend to end, and
			// with it the lock.
			waitUnlocked(t, fence)
			if _, next := seedWorker(t, fence); next != term+1 {
				t.Fatalf("new leader's term: got %d, want %d", next, term+1)
			}
			return term
		}, tokens.ReasonStaleToken, "is below the current term"},
		{"ended term: lock released, no new leader", func(t *testing.T, fence string) int64 {
			t.Helper()
			old, term := seedWorker(t, fence)
			_ = old.Close(t.Context())
			waitUnlocked(t, fence)
			return term
		}, tokens.ReasonTermEnded, "is over and no leader holds it"},
		{"forged token above the term", func(t *testing.T, fence string) int64 {
			t.Helper()
			_, term := seedWorker(t, fence)
			return term + 1
		}, tokens.ReasonUnknownTerm, "ever held term"},
		{"no term row", func(_ *testing.T, _ string) int64 { return 1 }, tokens.ReasonUnknownTerm, "ever held term"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fence := unique("term_f")
			tok := tc.run(t, fence)
			before := writesOf(t)
			err := termWrite(t, b, fence, tok)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("write: got %v, want accepted", err)
				}
				if got := writesOf(t); got != before+1 {
					t.Errorf("rows: got %d, want %d", got, before+1)
				}
				return
			}
			wantRefusal(t, err, tc.reason, tc.msg)
			if got := writesOf(t); got != before {
				t.Errorf("rows after a refusal: got %d, want %d", got, before)
			}
		})
	}
}

// waitUnlocked waits until the server has let go of a closed session's
// advisory lock.
func waitUnlocked(t *testing.T, name string) {
	t.Helper()
	conn := admin(t)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
AND classid = ((hashtext($1)::bigint >> 32) & 4294967295)::oid AND objid = (hashtext($1)::bigint & 4294967295)::oid`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatalf("advisory lock of %q still held", name)
}

// A write of the old term that arrives while the new leader's raise is in
// flight waits for it, then is refused: the term row is read FOR SHARE.
func TestTermCheckRaiseInFlight(t *testing.T) {
	b := openTermBackend(t)
	fence := unique("term_f")
	old, term := seedWorker(t, fence)
	_ = old.Close(t.Context())
	waitUnlocked(t, fence)

	next, err := pgx.Connect(t.Context(), server.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close(t.Context())
	mustExec(t, next, "SELECT pg_advisory_lock(hashtext($1))", fence)
	tx, err := next.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var raised int64
	if err := tx.QueryRow(t.Context(), raiseSQL, fence).Scan(&raised); err != nil {
		t.Fatal(err)
	}

	before := writesOf(t)
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(t.Context(), fence, tokens.Token(term), []Statement{{SQL: "INSERT INTO term_writes VALUES (1)"}})
		done <- err
	}()
	waitBlocked(t)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		wantRefusal(t, err, tokens.ReasonStaleToken, "is below the current term")
	case <-time.After(10 * time.Second):
		t.Fatal("write did not finish")
	}
	if got := writesOf(t); got != before {
		t.Errorf("rows after a refusal: got %d, want %d", got, before)
	}
	if err := termWrite(t, b, fence, raised); err != nil {
		t.Errorf("new leader's write: got %v, want accepted", err)
	}
}

// waitBlocked waits until a fencegate write waits for a row lock. If it
// never does, the write went on without waiting: the test then sees it.
func waitBlocked(t *testing.T) {
	t.Helper()
	conn := admin(t)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE application_name = 'fencegate' AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
}

// TestTermCheckOnlyFirst: advance_term, like advance, runs only as its
// transaction's first statement (migration 007), so a statement of a
// write already checked cannot run another fence's check, here with the
// other election's real current term, from dynamic SQL after RESET ALL.
func TestTermCheckOnlyFirst(t *testing.T) {
	openTermBackend(t) // the term table
	fence := unique("term_first")
	_, term := seedWorker(t, fence)
	conn, err := pgx.Connect(t.Context(), runtimeDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	call := "SELECT fencegate.advance_term('" + fence + "', " + strconv.FormatInt(term, 10) + ", 'public.leadership_term', 'hashtext')"
	_, err = conn.Exec(t.Context(), "SELECT fencegate.advance('"+unique("mine")+"', 1); DO $$ BEGIN EXECUTE 'RESET ALL'; EXECUTE '"+strings.ReplaceAll(call, "'", "''")+"'; END $$")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "FG006" {
		t.Fatalf("advance_term after a check: got %v, want SQLSTATE FG006", err)
	}
	var n int
	if err := admin(t).QueryRow(t.Context(), "SELECT count(*) FROM fencegate.fences WHERE name = $1", fence).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("fence %s: got a mark, want none", fence)
	}
	// In a read-only transaction, which locks nothing, the term row is
	// read without a lock (migration 007), and no mark is made.
	tx, err := conn.BeginTx(t.Context(), pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), call); err != nil {
		t.Fatalf("advance_term in a read-only transaction: %v", err)
	}
	_ = tx.Rollback(t.Context())
	// First in its transaction, the same call is the check.
	if _, err := conn.Exec(t.Context(), call); err != nil {
		t.Fatalf("advance_term first: %v", err)
	}
}
