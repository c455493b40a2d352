package postgres

import (
	"runtime"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam22HugeErrorReadWhole: the result guard bounds what a write's
// rows may hold (MaxResultBytes, counted inside the database, "fencegate
// never holds the result"), and clipPgError cuts a server error to 1 KiB
// — after pgconn has read the whole ErrorResponse into memory and copied
// its fields into strings. PostgreSQL quotes the offending input in many
// errors (invalid input syntax for type integer: "…"), so one statement
// decides how large the error is, up to the protocol's limit pgx keeps
// (maxMessageBodyLen, 1 GiB): fencegate never lowers it
// (Frontend().SetMaxBodyLen), and nothing else bounds it.
//
// Attack: any caller with a valid token for a fence of its own sends
// SELECT repeat('x', 32 MiB)::int, a 40-byte statement, against a backend
// whose MaxResultBytes is 64 KiB.
//
// What happens: the write is refused STATEMENT_FAILED, clipped, as it
// should be, but fencegate allocated 96 MiB, three times the error, to
// read it (message buffer, then the decoded strings) before clipping it. At 1 GiB per write and
// Config.MaxConns writes at once (4 per CPU), a few requests take the
// gateway's memory, every fence's writes with it.
//
// Expected: what a write makes fencegate hold stays within a small
// multiple of the result limits, errors included: an ErrorResponse (or
// NoticeResponse) far over them should end the connection, not be read.
//
// Severity: medium (memory DoS of the gateway by any writer).
func TestRedTeam22HugeErrorReadWhole(t *testing.T) {
	// A runtime login of its own whose errors the server does not log:
	// the test server's log reader would otherwise be what allocates
	// (see TestRedTeam22ServerLogLineQuadratic).
	login := unique("rt22_quiet")
	dsn, err := server.RuntimeRole(t.Context(), login)
	if err != nil {
		t.Fatal(err)
	}
	db := admin(t)
	mustExec(t, db, "ALTER ROLE "+login+" SET log_min_messages = panic")
	mustExec(t, db, "ALTER ROLE "+login+" SET log_min_error_statement = panic")
	b, err := Open(t.Context(), dsn, Config{MaxConns: 1, MaxResultRows: 100, MaxResultBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	fence := unique("rt22_bigerr")
	// Warm the connection and prepare nothing big.
	if _, err := b.Exec(t.Context(), fence, 1, []Statement{{SQL: "SELECT 1"}}); err != nil {
		t.Fatal(err)
	}
	const size = 32 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = b.Exec(t.Context(), fence, 1, []Statement{{SQL: "SELECT repeat('x', 33554432)::int"}})
	runtime.ReadMemStats(&after)
	r, ok := tokens.AsRefusal(err)
	if !ok || r.Reason != tokens.ReasonStatementFailed {
		t.Fatalf("got %v, want STATEMENT_FAILED", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("refusal of %d bytes; fencegate allocated %d MiB for the write (result limit 64 KiB, error %d MiB)", len(err.Error()), alloc>>20, size>>20)
	if limit := uint64(8 << 20); alloc > limit {
		t.Errorf("HOLE: one write of a 40-byte statement made fencegate allocate %d MiB (MaxResultBytes 64 KiB): a server error is read whole, up to 1 GiB", alloc>>20)
	}
}
