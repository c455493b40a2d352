package pgwire_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestCopySyncBetweenData: a Sync between two CopyData messages is read
// in copy-in, and ignored; fencegate's answers are PostgreSQL's to the
// same messages, its queue in step (a Sync queued for a reply that never
// comes would hold the next statement for good).
func TestCopySyncBetweenData(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "copygate_mid")
	tok, _ := e.lead(t, "copygate-mid")
	steps := []rt9Step{
		{'G', []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "COPY copygate_mid (v) FROM STDIN"}, &pgproto3.Bind{},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{},
		}},
		{'Z', []pgproto3.FrontendMessage{
			&pgproto3.CopyData{Data: []byte("a\n")}, &pgproto3.Sync{}, &pgproto3.Flush{},
			&pgproto3.CopyData{Data: []byte("b\n")}, &pgproto3.Sync{},
			&pgproto3.CopyDone{}, &pgproto3.Sync{},
			&pgproto3.Query{String: "SELECT count(*) FROM copygate_mid"},
		}},
		{'Z', nil},
		{'Z', []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT 2"}}},
	}
	e.table(t, "copygate_mid")
	want := rt9Run(rt9Direct(t), steps)
	e.table(t, "copygate_mid")
	got := rt9Run(rt9Via(t, e, "copygate-mid", tok), steps)
	t.Logf("PostgreSQL: %q", want)
	t.Logf("fencegate:  %q", got)
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Errorf("BROKEN: Syncs between COPY data answer %q through fencegate, %q from PostgreSQL", got, want)
	}
}

// TestCopyQueryInCopyIn: a Query sent in copy-in is read by the server as
// a broken COPY (08P01), not run; fencegate, which would wait for its
// answers, ends the session with 08P01 at once, and nothing of the Query
// is stored.
func TestCopyQueryInCopyIn(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "copygate_query")
	tok, _ := e.lead(t, "copygate-query")
	c := rt9Via(t, e, "copygate-query", tok)
	if got := c.step('G', 5*time.Second, &pgproto3.Query{String: "COPY copygate_query (v) FROM STDIN"}); fmt.Sprint(got) != "[G]" {
		t.Fatalf("COPY: %q", got)
	}
	got := c.step('Z', 5*time.Second,
		&pgproto3.CopyData{Data: []byte("a\n")},
		&pgproto3.Query{String: "INSERT INTO copygate_query (v) VALUES ('smuggled')"})
	if len(got) == 0 || got[0] != "E:08P01" || !rt9Hung(got) || got[len(got)-1] == "TIMEOUT" {
		t.Errorf("BROKEN: a Query in copy-in answers %q, want FATAL 08P01 and the connection closed", got)
	}
	if n := e.count(t, "copygate_query"); n != 0 {
		t.Errorf("%d rows stored", n)
	}
}
