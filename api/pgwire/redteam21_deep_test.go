package pgwire_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam21DeepExpressionCrashesListener: the listener classifies
// every Query and Parse with pg_query (classify) before anything else,
// before the fence check's admission too: a client with a stale or forged
// token, or one the policy denies, gets that far once the database has
// logged it in. pg_query's parser builds a left-deep tree for a long
// chain of binary operators (SELECT 1+1+...+1: the grammar reduces it
// without growing its own stack), and libpg_query's conversion of the tree
// to protobuf (pg_query_parse_protobuf) then recurses once per operator
// on the C stack of the goroutine's thread. libpg_query's
// check_stack_depth never fires (its stack_base_ptr is never set), so a
// chain of a few hundred thousand terms (under a MiB, far below
// MaxMessage's 256 MiB) overflows the C stack: SIGSEGV during a cgo call,
// which Go cannot recover (contain's recover does not see it). The whole
// fencegate process dies: every listener session (their open transactions
// rolled back mid-flight), and gRPC, HTTP and RESP with them.
//
// The attack runs in a child process of the test binary (re-executed with
// RT21_DEEP_CHILD=1), so that the crash ends that process alone: the
// child starts a listener, sends the Query, and then checks that the
// listener still serves a new client.
//
// What happened: the child dies with "SIGSEGV: segmentation violation ...
// signal arrived during cgo execution" in pg_query_parse_protobuf, called
// from the listener's classify.
//
// What should happen: the listener refuses the statement (FG006, cannot
// tell whether it is fenced, or the database's own stack depth error) and
// serves on; classify should bound what it hands pg_query (nesting depth,
// operator count) or run it where a deep tree cannot take the process
// down.
//
// Severity: critical (availability) — any login, whatever its token or
// policy, kills every replica it can reach, one Query each.
func TestRedTeam21DeepExpressionCrashesListener(t *testing.T) {
	if os.Getenv("RT21_DEEP_CHILD") == "1" {
		rt21DeepChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRedTeam21DeepExpressionCrashesListener$", "-test.v", "-test.count=1")
	// The child's etcd and PostgreSQL directories, which a crash leaves
	// behind, go in a directory of the parent's (the postmaster gets
	// SIGQUIT as its parent dies: Pdeathsig).
	tmp, err := os.MkdirTemp("", "rt21") //nolint:usetesting // removed by the parent after the child, whatever the child left
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // the postgres user works in it
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "RT21_DEEP_CHILD=1", "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(string(out), "\n")
	var head []string
	for _, l := range lines {
		if strings.HasPrefix(l, "SIGSEGV") || strings.HasPrefix(l, "signal arrived") || strings.Contains(l, "pg_query_parse_protobuf") ||
			strings.Contains(l, "pgwire.classify") || strings.Contains(l, "rt21 child") || strings.HasPrefix(l, "--- ") {
			head = append(head, l)
		}
	}
	if err != nil {
		t.Errorf("HOLE: one Query of a logged-in client took the whole listener process down: %v\n%s", err, strings.Join(head, "\n"))
		return
	}
	t.Logf("child:\n%s", strings.Join(head, "\n"))
}

// rt21DeepChild is the attack, in the child process.
func rt21DeepChild(t *testing.T) {
	t.Helper()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt21-deep")
	// A stale token would do as well: classify runs before admission.
	z := e.raw(t, "rt21-deep", tok)
	sql := "SELECT " + strings.Repeat("1+", 500000) + "1"
	z.send(&pgproto3.Query{String: sql})
	errs, _, err := z.results(1)
	t.Logf("rt21 child: deep query: errors %.200q, %v", errs, err)
	c := e.connect(t, "rt21-deep", tok)
	var one int
	if err := c.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("rt21 child: a new client after the deep query: %v", err)
	}
	t.Logf("rt21 child: the listener serves on")
}
