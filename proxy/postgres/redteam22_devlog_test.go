package postgres

import (
	"runtime"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam22ServerLogLineQuadratic: `fencegate dev` runs its
// PostgreSQL with package throwaway (the server these tests use), whose
// stderr goes to serverproc.LogWriter. Its Write appends each chunk the
// pipe delivers to the partial line and then scans
// string(w.partial) for a newline: a copy of the whole partial line per
// chunk, so a line of n bytes arriving in 64 KiB chunks costs n²/128 KiB
// of allocation and copying, in the gateway's process. It keeps the last
// 20 lines whole as well. PostgreSQL logs every failed statement's ERROR,
// and quotes the offending input in it, so any writer decides how long a
// log line is.
//
// Attack: a write of SELECT repeat('x', 16 MiB)::int through the backend
// (any caller with a token for a fence of its own; dev serves HTTP, gRPC
// and the listener on loopback without a policy).
//
// What happens: the write is refused STATEMENT_FAILED, and the gateway's
// process allocates gigabytes, burning CPU for seconds, to read one log
// line of 16 MiB (32 MiB: 16 GiB, about 5 s; it grows with the square).
//
// Expected: a log line costs about its length once; a line over a bound
// is cut, not accumulated.
//
// Severity: low (fencegate dev, fencebench and fencechaos only), but any
// writer of a dev gateway can pin its CPU and memory at will.
func TestRedTeam22ServerLogLineQuadratic(t *testing.T) {
	fence := unique("rt22_devlog")
	const size = 16 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := backend.Exec(t.Context(), fence, 1, []Statement{{SQL: "SELECT repeat('y', 16777216)::int"}})
	if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonStatementFailed {
		t.Fatalf("got %v, want STATEMENT_FAILED", err)
	}
	// The log line is read on the log writer's goroutine: wait until
	// allocation settles (bounded).
	last := uint64(0)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		runtime.ReadMemStats(&after)
		if after.TotalAlloc-last < 1<<20 {
			break
		}
		last = after.TotalAlloc
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("one write of a %d MiB error: the process allocated %d MiB in %v", size>>20, alloc>>20, time.Since(start).Round(time.Millisecond))
	if limit := uint64(16 * size); alloc > limit {
		t.Errorf("HOLE: one failed write made the process allocate %d MiB (%dx the %d MiB log line): the server log reader copies the partial line per chunk", alloc>>20, alloc/size, size>>20)
	}
}
