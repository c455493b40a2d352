package api_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// TestRedTeam12RefusalLogRetainsHostileFenceNames: the pipeline logs
// identical refusals at most once a second, remembering each (backend,
// fence, reason, token) it logged in a map (proxy/reflog.go) of at most
// 4096 keys, pruned only when it is full. The key holds the fence name as
// the client sent it, whole: a gRPC Exec whose fence name is 1 MiB (over
// the body limit, or just an invalid name) is refused, and its 1 MiB name
// stays in the map. Anyone who reaches the gRPC port — no identity needed:
// UNAUTHENTICATED refusals are remembered too — makes fencegate hold up
// to 4096 × 2 MiB (MaxRecvMsgSize is twice --max-body-bytes, 1 MiB by
// default): 8 GiB, for as long as fewer than 4096 other refusals follow.
// Here 200 requests of 100 KiB names (the harness's gRPC limit is twice
// its 64 KiB body limit, as serve's); safe outcome: what fencegate still
// holds afterwards does not grow with the names' length.
func TestRedTeam12RefusalLogRetainsHostileFenceNames(t *testing.T) {
	r := startReplica(t, true)
	const n, size = 200, 100 << 10
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "fencing-token", "1"), 60*time.Second)
	defer cancel()
	send := func(i int) {
		fence := fmt.Sprintf("%06d", i) + strings.Repeat("x", size)
		_, err := r.grpc.Exec(ctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{Sql: "SELECT 1"}}})
		if rtReason(err) != "INVALID_REQUEST" {
			t.Fatalf("request %d: got %v, want INVALID_REQUEST", i, err)
		}
	}
	send(-1) // warm up: connections, pools, first log line
	heap := func() uint64 {
		// The test's log buffer holds each refusal's log line (the
		// name in it); serve's log goes to stderr and holds nothing.
		r.logs.mu.Lock()
		r.logs.b = strings.Builder{}
		r.logs.mu.Unlock()
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for i := range n {
		send(i)
	}
	after := heap()
	grew := int64(after) - int64(before)
	t.Logf("heap before %d MiB, after %d MiB", before>>20, after>>20)
	if grew > n*size/4 {
		t.Errorf("HOLE: after %d refused requests with %d-byte fence names, fencegate holds %d MiB more (about one name each); "+
			"4096 such requests of 2 MiB would hold 8 GiB", n, size, grew>>20)
	}
}
