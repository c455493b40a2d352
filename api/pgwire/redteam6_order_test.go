package pgwire_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt6Hold arms e's answering hook (SetTestHookAnswering) once: the next
// ReadyForQuery S2C takes off the queue is held, before it is written to
// the client, until release is closed; held is closed when it is.
func rt6Hold(e *env) (held, release chan struct{}) {
	var armed atomic.Bool
	held, release = make(chan struct{}), make(chan struct{})
	e.srv.SetTestHookAnswering(func() {
		if armed.CompareAndSwap(true, false) {
			close(held)
			<-release
		}
	})
	armed.Store(true)
	return held, release
}

// rt6Wait waits for ch, failing after 10 s.
func rt6Wait(t *testing.T, what string, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not after 10 s", what)
	}
}

// rt6Describe names a backend message for a failure report.
func rt6Describe(m pgproto3.BackendMessage) string {
	switch m := m.(type) {
	case *pgproto3.CommandComplete:
		return fmt.Sprintf("CommandComplete %q", m.CommandTag)
	case *pgproto3.ErrorResponse:
		return fmt.Sprintf("ErrorResponse %s %s %q", m.Severity, m.Code, m.Message)
	case *pgproto3.ReadyForQuery:
		return fmt.Sprintf("ReadyForQuery %q", m.TxStatus)
	default:
		return fmt.Sprintf("%T", m)
	}
}

// rt6Answers reads n answers, each up to and including its
// ReadyForQuery, and returns them (the end of the connection ends it).
func rt6Answers(t *testing.T, fe *pgproto3.Frontend, n int) [][]pgproto3.BackendMessage {
	t.Helper()
	var out [][]pgproto3.BackendMessage
	var cur []pgproto3.BackendMessage
	for len(out) < n {
		m, err := fe.Receive()
		if err != nil {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			t.Logf("connection ended after %d answers: %v", len(out), err)
			return out
		}
		// pgproto3 reuses message values: keep copies of what is checked.
		switch v := m.(type) {
		case *pgproto3.CommandComplete:
			m = &pgproto3.CommandComplete{CommandTag: append([]byte(nil), v.CommandTag...)}
		case *pgproto3.ErrorResponse:
			c := *v
			m = &c
		case *pgproto3.ReadyForQuery:
			c := *v
			m = &c
		}
		cur = append(cur, m)
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			out = append(out, cur)
			cur = nil
		}
	}
	return out
}

func rt6Show(answers [][]pgproto3.BackendMessage) string {
	var b strings.Builder
	for i, a := range answers {
		fmt.Fprintf(&b, "\n  answer %d:", i+1)
		for _, m := range a {
			b.WriteString(" [" + rt6Describe(m) + "]")
		}
	}
	return b.String()
}

func rt6HasError(a []pgproto3.BackendMessage) bool {
	for _, m := range a {
		if _, ok := m.(*pgproto3.ErrorResponse); ok {
			return true
		}
	}
	return false
}

// TestRedTeam6LocalAnswerOvertakesCommit: a client pipelines simple
// Queries (as the protocol allows: the server answers them in order).
// The first, an INSERT, commits; S2C takes its ReadyForQuery off the
// queue, which drops the session's count of unanswered Queries (syncs)
// to 0, and C2S, waiting in startSegment for exactly that, goes on to the
// next Query while S2C has not yet written that ReadyForQuery (the
// unsent window of TestShutdownBetweenCommitAndAnswer). The next Queries
// are ones fencegate answers itself (a SET fencegate.token, then an
// INSERT refused at once because the token is now stale): C2S writes
// their answers straight to the client, ahead of the first Query's
// ReadyForQuery. The client matches answers to Queries in order, so it
// reads the committed INSERT's answer as the SET's, the SET as refused
// (FG001), and the refused INSERT, of which nothing is stored, as
// answered with success (a bare ReadyForQuery).
func TestRedTeam6LocalAnswerOvertakesCommit(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt6simple")
	tok, _ := e.lead(t, "rt6simple")
	conn := e.hijack(t, "rt6simple", tok)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fe := pgproto3.NewFrontend(conn, conn)

	held, release := rt6Hold(e)
	fe.Send(&pgproto3.Query{String: "INSERT INTO rt6simple (v) VALUES ('committed')"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	rt6Wait(t, "the INSERT's ReadyForQuery at the hook", held)
	// Committed, and its answer held in S2C. The client's next Queries:
	fe.Send(&pgproto3.Query{String: "SET fencegate.token = '1'"})
	fe.Send(&pgproto3.Query{String: "INSERT INTO rt6simple (v) VALUES ('refused: token 1 is stale')"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // fencegate has read them and answered what it answers itself
	close(release)

	answers := rt6Answers(t, fe, 3)
	t.Logf("answers:%s", rt6Show(answers))
	if n := e.count(t, "rt6simple"); n != 1 {
		t.Fatalf("rows %d, want 1 (the first INSERT's)", n)
	}
	ok := len(answers) == 3
	if ok {
		cc, isCC := answers[0][0].(*pgproto3.CommandComplete)
		ok = isCC && string(cc.CommandTag) == "INSERT 0 1" && !rt6HasError(answers[0]) && len(answers[0]) == 2
	}
	if ok {
		cc, isCC := answers[1][0].(*pgproto3.CommandComplete)
		ok = isCC && string(cc.CommandTag) == "SET" && !rt6HasError(answers[1])
	}
	if ok {
		ok = rt6HasError(answers[2])
	}
	if !ok {
		t.Errorf("the client read, for INSERT (stored), SET fencegate.token = '1', INSERT (refused, not stored):%s\n"+
			"want [INSERT 0 1][RFQ] / [SET][RFQ] / [ErrorResponse FG001][RFQ]: fencegate's own answers overtook the committed INSERT's ReadyForQuery, so the refused INSERT reads as a success", rt6Show(answers))
	}
}

// TestRedTeam6LocalRefusalOvertakesSync: the same window in the extended
// protocol, as libpq's pipeline mode (PQpipelineSync between queries)
// and PgJDBC send it: the first segment (Parse, Bind, Execute of an
// INSERT, Sync) commits at its Sync; while S2C holds its ReadyForQuery,
// C2S starts the next segment, an invalid SET fencegate.token that it
// answers itself, and writes its ErrorResponse to the client ahead of
// the first segment's ReadyForQuery. An ErrorResponse before a segment's
// ReadyForQuery says its implicit transaction failed and was rolled
// back: the client is told its INSERT failed, and the table holds it.
func TestRedTeam6LocalRefusalOvertakesSync(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt6ext")
	tok, _ := e.lead(t, "rt6ext")
	conn := e.hijack(t, "rt6ext", tok)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fe := pgproto3.NewFrontend(conn, conn)

	held, release := rt6Hold(e)
	fe.Send(&pgproto3.Parse{Query: "INSERT INTO rt6ext (v) VALUES ('committed')"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	rt6Wait(t, "the first segment's ReadyForQuery at the hook", held)
	fe.Send(&pgproto3.Parse{Query: "SET fencegate.token = 'not-a-number'"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // fencegate has read the second segment and refused it
	close(release)

	answers := rt6Answers(t, fe, 2)
	t.Logf("answers:%s", rt6Show(answers))
	if n := e.count(t, "rt6ext"); n != 1 {
		t.Fatalf("rows %d, want 1 (the first segment's INSERT)", n)
	}
	if len(answers) != 2 || rt6HasError(answers[0]) || !rt6HasError(answers[1]) {
		t.Errorf("segments INSERT+Sync (committed, stored) and SET fencegate.token = 'not-a-number'+Sync: the client read%s\n"+
			"want the INSERT's segment without error and the SET's refused: the refusal overtook the first segment's ReadyForQuery, so the client is told its stored INSERT failed", rt6Show(answers))
	}
}

// TestRedTeam6OversizeFatalOvertakesCommit: a client pipelines an INSERT
// and then a message over MaxMessage. C2S writes the FATAL for the
// oversized message (tellFatal) as soon as it reads its header, whatever
// is still outstanding: here the INSERT has committed and S2C is about to
// write its ReadyForQuery. PostgreSQL answers messages in order (the
// INSERT's CommandComplete and ReadyForQuery, then FATAL); through
// fencegate the client reads the FATAL in the INSERT's answer, before its
// ReadyForQuery, and then the connection ends: a driver reports the
// INSERT as failed, and the table holds it.
func TestRedTeam6OversizeFatalOvertakesCommit(t *testing.T) {
	const limit = 65535
	e := newEnv(t, pgwire.Config{MaxMessage: limit})
	e.table(t, "rt6big")
	tok, _ := e.lead(t, "rt6big")
	conn := e.hijack(t, "rt6big", tok)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fe := pgproto3.NewFrontend(conn, conn)

	held, release := rt6Hold(e)
	fe.Send(&pgproto3.Query{String: "INSERT INTO rt6big (v) VALUES ('committed')"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	rt6Wait(t, "the INSERT's ReadyForQuery at the hook", held)
	fe.Send(&pgproto3.Query{String: "SELECT '" + strings.Repeat("x", limit+100) + "'"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // fencegate has read the oversized message's header
	close(release)

	answers := rt6Answers(t, fe, 2)
	t.Logf("answers:%s", rt6Show(answers))
	if n := e.count(t, "rt6big"); n != 1 {
		t.Fatalf("rows %d, want 1 (the INSERT's)", n)
	}
	var first []pgproto3.BackendMessage
	if len(answers) > 0 {
		first = answers[0]
	}
	rfq := false
	if len(first) > 0 {
		_, rfq = first[len(first)-1].(*pgproto3.ReadyForQuery)
	}
	if rt6HasError(first) || !rfq {
		t.Errorf("INSERT (stored), then a message over the limit: the client read%s\n"+
			"want [INSERT 0 1][ReadyForQuery] before the FATAL: the FATAL overtook the committed INSERT's ReadyForQuery", rt6Show(answers))
	}
}
