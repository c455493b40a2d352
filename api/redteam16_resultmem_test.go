package api_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/proxy/postgres"
)

// TestRedTeam16ResultGuardWeighsTextNotMemory: the result guard bounds
// what one write returns (--max-result-bytes, 4 MiB by default) so that
// fencegate's memory per write is bounded ("eight SELECT
// generate_series(1,1000000): 2.5 GB RSS" in docs/SAFETY.md was closed by
// it). It weighs each row as its text, octet_length((row)::text)
// (proxy/postgres/validate.go sendText), but fencegate holds a result as
// decoded Go values (proxy/postgres/values.go decodeValue, jsonValue) and
// then as structpb values (api/server.go jsonValue): one json element "{}"
// or "[]" of 3 bytes of text becomes a map or slice, an interface and a
// *structpb.Value with its Struct, about a hundred times its weight, and
// an int8[] element "0," of 2 bytes arrives as 12 bytes of binary and
// becomes an interface and a *structpb.Value. A 60-byte statement that
// passes the guard makes one HTTP write allocate hundreds of megabytes;
// eight at once are the 2.5 GB of the original attack.
//
// Safe outcome: a write the guard lets through costs fencegate memory of
// the order of the limit (here at most 16 times it, which a plain 4 MB
// string stays far under), or is refused and rolled back.
func TestRedTeam16ResultGuardWeighsTextNotMemory(t *testing.T) {
	r := startReplica(t, true)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	limit := postgres.DefaultConfig().MaxResultBytes
	bound := 16 * uint64(limit)

	for _, tc := range []struct {
		name, sql string
		control   bool
	}{
		{"control: 4 MB string", "SELECT repeat('x', 4000000)", true},
		{"json of 1.39M empty objects", "SELECT ('[' || repeat('{},', 1390000) || '{}]')::json", false},
		{"int8[] of 2.09M zeros", "SELECT array_fill(0::int8, ARRAY[2090000])", false},
	} {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		req, err := http.NewRequest(http.MethodPost, r.url+"/v1/fences/"+fence+"/sql",
			strings.NewReader(sqlBody(fmt.Sprintf(`{"sql":%q}`, tc.sql))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Fencing-Token", fmt.Sprint(l.token))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body) // not decoded: the test's own allocations stay small
		resp.Body.Close()
		runtime.ReadMemStats(&m1)
		alloc := m1.TotalAlloc - m0.TotalAlloc
		t.Logf("%s: HTTP %d, %d bytes answered; %d MB allocated while serving it", tc.name, resp.StatusCode, n, alloc>>20)
		switch {
		case resp.StatusCode != http.StatusOK:
			// Refused (and rolled back): safe.
		case tc.control && alloc > bound:
			t.Fatalf("%s: control allocated %d MB, over the bound of %d MB: the test is miscalibrated", tc.name, alloc>>20, bound>>20)
		case alloc > bound:
			t.Errorf("%s: accepted (the guard weighed it under its %d-byte limit), and serving it allocated %d MB, "+
				"%d times the limit: the guard bounds the text, not what fencegate holds", tc.name, limit, alloc>>20, alloc/uint64(limit))
		}
	}
}
