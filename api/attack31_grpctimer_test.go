package api_test

import (
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// TestAttack31FinishedCallsPinnedByFirstMessageTimer: firstMessageTap
// arms a 30 s time.AfterFunc(cancel) on every gRPC stream, and only the
// interceptors (firstMessageUnary, firstMessageStream's RecvMsg) stop it.
// A call that ends before any interceptor runs (unknown method, a
// message refused for size, a bad compression) never stops its timer: the
// timer's closure holds the call's context, and with it the call's
// incoming metadata (up to 64 KiB, MaxHeaderListSize), for 30 s after
// the call is over. Before the change a finished call's memory was freed
// at once; now an unauthenticated client holds rate x 30 s x 64 KiB, with
// no stream limit bounding it (the calls are over: MaxConcurrentStreams
// does not count them). 1500 finished calls with 48 KiB of metadata must
// not leave about 70 MiB of heap behind (measured: +72 MiB, back to
// the baseline once 31 s have passed, so the timers are what holds it).
func TestAttack31FinishedCallsPinnedByFirstMessageTimer(t *testing.T) {
	_, conn, _ := rtGRPCServer(t, 64<<10)
	big := strings.Repeat("x", 48<<10)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", "1", "pad", big)
	call := func() {
		err := conn.Invoke(ctx, "/fencegate.v1.Gateway/NoSuchMethod", &fencegatev1.ExecRequest{}, new(fencegatev1.ExecResponse))
		if err == nil {
			t.Fatal("an unknown method answered")
		}
	}
	for range 20 { // warm up connections and pools
		call()
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const n = 1500
	for range n {
		call()
	}
	after := heap()
	grew := int64(after) - int64(before)
	t.Logf("heap %d -> %d (+%d KiB) after %d finished calls", before, after, grew>>10, n)
	if limit := int64(16 << 20); grew > limit {
		t.Errorf("HOLE: %d finished gRPC calls (unknown method, 48 KiB metadata each) left %d MiB of heap behind after GC, "+
			"held by their first-message timers for 30 s (want under %d MiB)", n, grew>>20, limit>>20)
	}
}
