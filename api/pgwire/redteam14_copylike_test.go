package pgwire_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt14Step reads answers up to n messages of kind until ('Z' or 'G'),
// each as a short string, "TIMEOUT" if none within wait.
func (r *rt9Conn) rt14Step(until byte, n int, wait time.Duration, msgs ...pgproto3.FrontendMessage) []string {
	r.t.Helper()
	for _, m := range msgs {
		r.fe.Send(m)
	}
	if err := r.fe.Flush(); err != nil {
		return []string{"WRITE:" + err.Error()}
	}
	_ = r.conn.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = r.conn.SetReadDeadline(time.Time{}) }()
	var out []string
	if n == 0 {
		n = 1
	}
	for {
		m, err := r.fe.Receive()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return append(out, "TIMEOUT")
			}
			return append(out, "READ:"+err.Error())
		}
		switch m := m.(type) {
		case *pgproto3.ParseComplete:
			out = append(out, "1")
		case *pgproto3.BindComplete:
			out = append(out, "2")
		case *pgproto3.CloseComplete:
			out = append(out, "3")
		case *pgproto3.NoData:
			out = append(out, "n")
		case *pgproto3.ParameterDescription:
			out = append(out, "t")
		case *pgproto3.RowDescription:
			out = append(out, "T")
		case *pgproto3.PortalSuspended:
			out = append(out, "s")
		case *pgproto3.EmptyQueryResponse:
			out = append(out, "I")
		case *pgproto3.CommandComplete:
			out = append(out, string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			out = append(out, "E:"+m.Code+":"+m.Message)
		case *pgproto3.DataRow:
			out = append(out, "D:"+string(m.Values[0]))
		case *pgproto3.CopyInResponse:
			out = append(out, "G")
			if until == 'G' {
				n--
				if n == 0 {
					return out
				}
			}
		case *pgproto3.CopyOutResponse:
			out = append(out, "H")
		case *pgproto3.CopyData:
			out = append(out, "d:"+string(m.Data))
		case *pgproto3.CopyDone:
			out = append(out, "c")
		case *pgproto3.ReadyForQuery:
			out = append(out, "Z:"+string(m.TxStatus))
			if until == 'Z' {
				n--
				if n == 0 {
					return out
				}
			}
		}
	}
}

type rt14S struct {
	until byte
	n     int
	msgs  []pgproto3.FrontendMessage
}

func rt14Run(c *rt9Conn, steps []rt14S) [][]string {
	var got [][]string
	for _, s := range steps {
		a := c.rt14Step(s.until, s.n, 3*time.Second, s.msgs...)
		got = append(got, a)
		if rt9Hung(a) {
			break
		}
	}
	return got
}

func fm(ms ...pgproto3.FrontendMessage) []pgproto3.FrontendMessage { return ms }

// TestRedTeam14CopyLikePostgres guards (passes today) that fencegate's
// answers across COPY FROM STDIN equal PostgreSQL's for the same bytes:
// several COPYs in one Query, COPY data pipelined before the
// CopyInResponse, errors before the COPY's Execute in the same segment,
// named statements and portals across segments, row limits, a second
// COPY Execute after CopyDone, stray CopyData/CopyDone/CopyFail, COPY TO
// STDOUT. A queue out of step shows as a difference or a TIMEOUT.
func TestRedTeam14CopyLikePostgres(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt14x")
	cp := "COPY rt14x (v) FROM STDIN"
	d := func(s string) *pgproto3.CopyData { return &pgproto3.CopyData{Data: []byte(s)} }
	done := &pgproto3.CopyDone{}
	sync := &pgproto3.Sync{}
	q := func(s string) *pgproto3.Query { return &pgproto3.Query{String: s} }
	cnt := q("SELECT count(*) FROM rt14x")
	for _, tc := range []struct {
		name  string
		steps []rt14S
	}{
		{"two copies", []rt14S{{'G', 1, fm(q(cp + "; " + cp))}, {'G', 1, fm(d("a\n"), done)}, {'Z', 1, fm(d("b\n"), done)}, {'Z', 1, fm(cnt)}}},
		{"copy+select", []rt14S{{'G', 1, fm(q(cp + "; SELECT 7"))}, {'Z', 1, fm(d("a\n"), done)}, {'Z', 1, fm(cnt)}}},
		{"pipelined simple", []rt14S{{'Z', 2, fm(q(cp), d("a\n"), done, cnt)}}},
		{"pipelined ext", []rt14S{{'Z', 2, fm(&pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync, d("a\n"), done, sync, cnt)}}},
		{"parse error before", []rt14S{{'Z', 2, fm(&pgproto3.Parse{Query: "SELECT * FROM rt14_nosuch"}, &pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync, d("a\n"), done, sync)}, {'Z', 1, fm(cnt)}}},
		{"exec error before", []rt14S{{'Z', 2, fm(&pgproto3.Parse{Query: "SELECT 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync, d("a\n"), done, sync)}, {'Z', 1, fm(cnt)}}},
		{"row limit", []rt14S{{'G', 1, fm(&pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{MaxRows: 1})}, {'Z', 1, fm(d("a\n"), d("b\n"), done, sync)}, {'Z', 1, fm(cnt)}}},
		{"named portal", []rt14S{{'Z', 1, fm(q("BEGIN"))}, {'G', 1, fm(&pgproto3.Parse{Name: "s1", Query: cp}, &pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s1"}, &pgproto3.Describe{ObjectType: 'P', Name: "p"}, &pgproto3.Execute{Portal: "p"})}, {'Z', 1, fm(d("a\n"), done, &pgproto3.Execute{Portal: "p"}, &pgproto3.Close{ObjectType: 'P', Name: "p"}, sync)}, {'Z', 1, fm(q("ROLLBACK"))}, {'Z', 1, fm(cnt)}}},
		{"named stmt later segment", []rt14S{{'Z', 1, fm(q("BEGIN"))}, {'Z', 1, fm(&pgproto3.Parse{Name: "s2", Query: cp}, sync)}, {'G', 1, fm(&pgproto3.Bind{DestinationPortal: "p2", PreparedStatement: "s2"}, sync, &pgproto3.Execute{Portal: "p2"}, sync)}, {'Z', 1, fm(d("a\n"), done, sync)}, {'Z', 1, fm(q("COMMIT"))}, {'Z', 1, fm(cnt)}}},
		{"copy to stdout", []rt14S{{'Z', 1, fm(q("COPY (SELECT 1) TO STDOUT"))}, {'Z', 1, fm(&pgproto3.Parse{Query: "COPY (SELECT 2) TO STDOUT"}, &pgproto3.Bind{}, &pgproto3.Execute{MaxRows: 1}, sync)}}},
		{"stray copy msgs", []rt14S{{'Z', 1, fm(d("x\n"), done, &pgproto3.CopyFail{Message: "x"}, q("SELECT 1"))}}},
		{"data after error", []rt14S{{'G', 1, fm(q(cp))}, {'Z', 1, fm(d("a\tb\n"))}, {'Z', 1, fm(d("x\n"), done, cnt)}}},
		{"query in ext segment", []rt14S{{'G', 1, fm(&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, q(cp))}, {'Z', 1, fm(d("a\n"), done)}, {'Z', 1, fm(sync)}, {'Z', 1, fm(cnt)}}},
		{"copyfail first of two", []rt14S{{'G', 1, fm(q(cp + "; " + cp))}, {'Z', 1, fm(d("a\n"), &pgproto3.CopyFail{Message: "no"})}, {'Z', 1, fm(done, cnt)}}},
		{"double done", []rt14S{{'G', 1, fm(q(cp + "; " + cp))}, {'Z', 1, fm(d("a\n"), done, done)}, {'Z', 1, fm(cnt)}}},
		{"ext copy in block then commit", []rt14S{{'Z', 1, fm(q("BEGIN"))}, {'G', 1, fm(&pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{})}, {'Z', 1, fm(d("a\n"), done, &pgproto3.Parse{Query: "SELECT 5"}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync)}, {'Z', 1, fm(q("COMMIT"))}, {'Z', 1, fm(cnt)}}},
		{"ext bad row then no sync query", []rt14S{{'G', 1, fm(&pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync)}, {'Z', 1, fm(d("a\tb\n"), done, sync)}, {'Z', 1, fm(cnt)}}},
		{"describe stmt copy", []rt14S{{'Z', 1, fm(&pgproto3.Parse{Name: "s3", Query: cp}, &pgproto3.Describe{ObjectType: 'S', Name: "s3"}, sync)}, {'G', 1, fm(&pgproto3.Bind{PreparedStatement: "s3"}, &pgproto3.Execute{}, sync)}, {'Z', 1, fm(d("a\n"), done, sync)}, {'Z', 1, fm(cnt)}}},
		{"copyfail ext in block", []rt14S{{'Z', 1, fm(q("BEGIN"))}, {'G', 1, fm(&pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync)}, {'Z', 1, fm(d("a\n"), &pgproto3.CopyFail{Message: "x"}, sync)}, {'Z', 1, fm(q("COMMIT"))}, {'Z', 1, fm(cnt)}}},
		{"setup begin copy", []rt14S{{'G', 1, fm(q("BEGIN ISOLATION LEVEL REPEATABLE READ; " + cp))}, {'Z', 1, fm(d("a\n"), done)}, {'Z', 1, fm(q("COMMIT"))}, {'Z', 1, fm(cnt)}}},
		{"copy then commit in block string", []rt14S{{'Z', 1, fm(q("BEGIN"))}, {'G', 1, fm(q(cp + "; COMMIT"))}, {'Z', 1, fm(d("a\n"), done)}, {'Z', 1, fm(cnt)}}},
		{"empty query after copy", []rt14S{{'Z', 2, fm(q(cp), d("a\n"), done, q(""))}, {'Z', 1, fm(cnt)}}},
		{"exec copy twice segments", []rt14S{{'G', 1, fm(&pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{})}, {'G', 1, fm(d("a\n"), done, &pgproto3.Bind{}, &pgproto3.Execute{}, sync)}, {'Z', 1, fm(d("b\n"), done, sync)}, {'Z', 1, fm(cnt)}}},
		{"flush in copy", []rt14S{{'G', 1, fm(&pgproto3.Parse{Query: cp}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})}, {'Z', 1, fm(d("a\n"), &pgproto3.Flush{}, done, sync)}, {'Z', 1, fm(cnt)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.table(t, "rt14x")
			want := rt14Run(rt9Direct(t), tc.steps)
			e.table(t, "rt14x")
			got := rt14Run(rt9Via(t, e, "rt14x", tok), tc.steps)
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("DIFF\nPostgreSQL: %q\nfencegate:  %q", want, got)
			}
		})
	}
}
