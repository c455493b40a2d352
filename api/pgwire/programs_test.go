package pgwire_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/api/pgwire"
)

// psql runs the real psql against the listener with PGOPTIONS carrying
// fence and token, and returns its output and error.
func (e *env) psql(t *testing.T, fence string, token uint64, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "psql", append([]string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", e.port, "-U", "worker", "-d", "postgres"}, args...)...)
	env := []string{"PGOPTIONS=-c fencegate.fence=" + fence + " -c fencegate.token=" + fmt.Sprint(token)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPsql: psql -c, -f with BEGIN/COMMIT and \copy through the listener
// with the leader's token; the zombie's are refused and store nothing.
func TestPsql(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "psql_t")
	old, resign := e.lead(t, "psqljobs")
	script := filepath.Join(t.TempDir(), "script.sql")
	if err := os.WriteFile(script, []byte("BEGIN;\nINSERT INTO psql_t (v) VALUES ('f1');\nINSERT INTO psql_t (v) VALUES ('f2');\nCOMMIT;\n\\copy psql_t (v) from stdin\nc1\nc2\n\\.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(token uint64) []error {
		var errs []error
		for _, args := range [][]string{
			{"-c", "INSERT INTO psql_t (v) VALUES ('c')"},
			{"-f", script},
		} {
			out, err := e.psql(t, "psqljobs", token, args...)
			if err != nil {
				err = fmt.Errorf("psql %v: %w: %s", args, err, out)
			}
			errs = append(errs, err)
		}
		return errs
	}
	for _, err := range run(old) {
		if err != nil {
			t.Fatalf("current token: %v", err)
		}
	}
	if got := e.count(t, "psql_t"); got != 5 {
		t.Fatalf("got %d rows, want 5", got)
	}
	// A syntax error points into the client's SQL, not fencegate's check.
	out, err := e.psql(t, "psqljobs", old, "-c", "SELECT * FROM nosuch_table")
	if err == nil || !strings.Contains(out, "LINE 1: SELECT * FROM nosuch_table") || strings.Contains(out, "advance") {
		t.Fatalf("got %v: %s, want psql's usual error for the client's SQL", err, out)
	}

	resign()
	cur, _ := e.lead(t, "psqljobs")
	if out, err := e.psql(t, "psqljobs", cur, "-c", "INSERT INTO psql_t (v) VALUES ('leader')"); err != nil {
		t.Fatalf("new leader: %v: %s", err, out)
	}
	before := e.count(t, "psql_t")
	for _, err := range run(old) {
		if err == nil || !strings.Contains(err.Error(), "fencegate: STALE_TOKEN") {
			t.Fatalf("zombie: got %v, want a STALE_TOKEN error", err)
		}
	}
	if got := e.count(t, "psql_t"); got != before {
		t.Fatalf("zombie stored %d rows", got-before)
	}
	// SET fencegate.token in the session, then the writes go through.
	out, err = e.psql(t, "psqljobs", old, "-c", fmt.Sprintf("SET fencegate.token TO '%d'", cur), "-c", "INSERT INTO psql_t (v) VALUES ('after-set')")
	if err != nil {
		t.Fatalf("SET fencegate.token: %v: %s", err, out)
	}
	if got := e.count(t, "psql_t"); got != before+1 {
		t.Fatalf("got %d rows, want %d", got, before+1)
	}
}

// TestRefusedByTheDatabase: when the database's mark is above a token the
// pipeline still admits (another replica raised it), the check inserted
// into the client's transaction refuses it: FG001 and nothing stored, for
// simple queries, extended ones, batches and blocks.
func TestRefusedByTheDatabase(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "dbpath")
	tok, _ := e.lead(t, "dbpath")
	c := e.connect(t, "dbpath", tok)
	if _, err := c.Exec(ctx, "INSERT INTO dbpath (v) VALUES ('ok')"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Exec(ctx, "SELECT fencegate.advance('dbpath', $1)", int64(tok)+1000); err != nil {
		t.Fatal(err)
	}
	// Forgotten afterwards: the next run's leader has a lower token than
	// this mark (go test -count=N).
	t.Cleanup(func() {
		if _, err := e.admin.Exec(context.WithoutCancel(ctx), "SELECT fencegate.reset('dbpath', 0)"); err != nil {
			t.Error(err)
		}
	})
	before := e.count(t, "dbpath")
	cases := map[string]func() error{
		"simple": func() error {
			_, err := c.Exec(ctx, "INSERT INTO dbpath (v) VALUES ('late')")
			return err
		},
		"extended": func() error {
			_, err := c.Exec(ctx, "INSERT INTO dbpath (v) VALUES ($1)", "late")
			return err
		},
		"batch": func() error {
			b := &pgx.Batch{}
			b.Queue("INSERT INTO dbpath (v) VALUES ($1)", "late1")
			b.Queue("INSERT INTO dbpath (v) VALUES ($1)", "late2")
			return c.SendBatch(ctx, b).Close()
		},
		"block": func() error {
			_, err := c.Exec(ctx, "BEGIN; INSERT INTO dbpath (v) VALUES ('late'); COMMIT")
			return err
		},
		"copy": func() error {
			_, err := c.CopyFrom(ctx, pgx.Identifier{"dbpath"}, []string{"v"}, pgx.CopyFromRows([][]any{{"late"}}))
			return err
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			err := f()
			if got := e.count(t, "dbpath"); got != before {
				t.Fatalf("stored %d rows with a stale token", got-before)
			}
			pe := wantCode(t, err, "FG001")
			if !strings.HasPrefix(pe.Message, "fencegate: STALE_TOKEN: ") {
				t.Fatalf("got message %q, want fencegate: STALE_TOKEN: …", pe.Message)
			}
		})
	}
}
