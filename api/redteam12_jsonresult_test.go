package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// TestRedTeam12JSONResultIntegersRounded: fencegate keeps integers exact
// both ways — a body with an integer beyond ±(2^53-1) is refused
// (jsonbody), and an int8 result beyond 2^53 is answered as a decimal
// string (api.jsonValue, postgres.jsonValue) — except inside json/jsonb
// results: pgx decodes a json value into float64s, and the answer carries
// the rounded double. A write that stores {"id": 9007199254740993} and
// RETURNs it is committed and answered {"id": 9007199254740992}: the
// client is told a value the database does not hold, with nothing to say
// so. Safe outcome: the number in the answer reads back as
// 9007199254740993 (a decimal string, as for int8), or the write is
// refused and nothing is written.
func TestRedTeam12JSONResultIntegersRounded(t *testing.T) {
	r := startReplica(t, true)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	c := db(t)
	table := strings.ToLower(strings.ReplaceAll(fence, "-", "_"))
	if _, err := c.Exec(t.Context(), fmt.Sprintf(
		`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s(id int primary key, doc jsonb not null)`, table)); err != nil {
		t.Fatal(err)
	}
	const big = "9007199254740993" // 2^53+1

	// HTTP: the doc comes as a string param, so the request is exact.
	stmt := fmt.Sprintf(`{"sql":"INSERT INTO %s(id, doc) VALUES (1, $1::jsonb) RETURNING doc","params":["{\"id\": %s}"]}`, table, big)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, r.url+"/v1/fences/"+fence+"/sql", strings.NewReader(sqlBody(stmt)))
	req.Header.Set("Fencing-Token", fmt.Sprint(l.token))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var stored string
	if err := c.QueryRow(t.Context(), fmt.Sprintf(`SELECT coalesce((SELECT doc->>'id' FROM %s WHERE id = 1), '')`, table)).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if res.StatusCode == http.StatusOK {
		if stored != big {
			t.Fatalf("setup: stored id %q, want %s", stored, big)
		}
		if got := returnedID(t, raw); got != big {
			t.Errorf("HOLE: HTTP: the committed row holds id %s; the answer says %s (%s)", stored, got, raw)
		}
	} else if stored != "" {
		t.Errorf("refused with %d, but the row was written (id %s)", res.StatusCode, stored)
	}

	// gRPC: the same, RETURNING the row just written.
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "fencing-token", fmt.Sprint(l.token)), 10*time.Second)
	defer cancel()
	out, err := r.grpc.Exec(ctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{
		{Sql: fmt.Sprintf("UPDATE %s SET doc = doc WHERE id = 1 RETURNING doc", table)},
	}})
	if err == nil && stored == big {
		b, _ := protojson.Marshal(out)
		if got := returnedID(t, b); got != big {
			t.Errorf("HOLE: gRPC: the row holds id %s; the answer says %s", big, got)
		}
	}
}

// returnedID is results[0].rows[0][0].id of an Exec answer, as its JSON
// text spells it.
func returnedID(t *testing.T, raw []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var b struct {
		Results []struct {
			Rows [][]map[string]any `json:"rows"`
		} `json:"results"`
	}
	if err := d.Decode(&b); err != nil || len(b.Results) == 0 || len(b.Results[0].Rows) == 0 || len(b.Results[0].Rows[0]) == 0 {
		t.Fatalf("answer %s: %v", raw, err)
	}
	return fmt.Sprint(b.Results[0].Rows[0][0]["id"])
}
