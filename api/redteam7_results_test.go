package api_test

// Red-team round 7: the size of what a committed write answers. The result
// guard (proxy/postgres/validate.go sendText, fencegate.check_result) is
// meant to fail, inside the database, a write whose result is too large to
// return: "the write rolls back and fencegate never holds the result"
// (proxy/postgres/doc.go). Each test asserts the safe outcome; a failing
// test is a hole.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// rt7Table creates a table of the test's own: (id int primary key, n int,
// v text).
func rt7Table(t *testing.T) string {
	t.Helper()
	c := db(t)
	name := strings.ToLower(strings.ReplaceAll(fenceName(t), "-", "_"))
	if _, err := c.Exec(t.Context(), fmt.Sprintf(
		`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s(id int primary key, n int not null, v text)`, name)); err != nil {
		t.Fatal(err)
	}
	return name
}

func rt7N(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := db(t).QueryRow(t.Context(), "SELECT n FROM "+table+" WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRedTeam7ResultGuardCompressed: the guard weighs a result with
// pg_column_size of its rows, which for a value stored compressed (TOAST,
// any text over ~2 kB) is the compressed size. A 16 MiB value of one
// repeated letter weighs about 190 kB, so a write returning it passes a
// 4 MiB guard, commits, and fencegate reads and answers all 16 MiB (the
// ratio is ~87: a 1 GB value, PostgreSQL's largest, weighs ~12 MB): the
// bound on what fencegate holds per write (and the write that was supposed
// to roll back) is gone. Safe outcome: the write is refused with
// INVALID_REQUEST (result over the limit) and rolled back, n unchanged.
func TestRedTeam7ResultGuardCompressed(t *testing.T) {
	r := startReplica(t, true)
	table := rt7Table(t)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)

	// 16 MiB, made by the database; the request is a few bytes.
	got := execHTTP(t, r, fence, l.token,
		fmt.Sprintf(`{"sql":"INSERT INTO %s(id, n, v) VALUES (1, 0, repeat('a', 16 << 20))"}`, table))
	if got.code != http.StatusOK {
		t.Fatalf("setup insert: HTTP %d %v", got.code, got.body)
	}
	var stored, raw int64
	if err := db(t).QueryRow(t.Context(), "SELECT pg_column_size(v), octet_length(v) FROM "+table+" WHERE id = 1").Scan(&stored, &raw); err != nil {
		t.Fatal(err)
	}
	t.Logf("value: %d bytes, stored as %d", raw, stored)

	got = execHTTP(t, r, fence, l.token,
		fmt.Sprintf(`{"sql":"UPDATE %s SET n = n + 1 WHERE id = 1 RETURNING v"}`, table))
	n := rt7N(t, table)
	if got.code == http.StatusOK {
		res, _ := got.body["results"].([]any)
		size := 0
		if len(res) == 1 {
			rows, _ := res[0].(map[string]any)["rows"].([]any)
			if len(rows) == 1 {
				if s, ok := rows[0].([]any)[0].(string); ok {
					size = len(s)
				}
			}
		}
		t.Errorf("HOLE: a write returning %d bytes (limit 4 MiB) was committed (n=%d) and answered with them: "+
			"the result guard weighed the compressed value (%d bytes)", size, n, stored)
		return
	}
	if got.reason != "INVALID_REQUEST" || n != 0 {
		t.Errorf("got HTTP %d %s, n=%d; want INVALID_REQUEST (result over the limit) and n=0", got.code, got.reason, n)
	}
}
