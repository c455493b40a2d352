package pgwire_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestRedTeam14TermEndsDuringCopyIn guards (passes today; no term-end test
// used COPY) that a zombie in copy-in, its check passed and the fence's
// row held, is ended with its term: the next leader's write goes
// through, the zombie is told FATAL, and none of its COPY rows is stored,
// not even with a CopyDone sent after the next leader's write.
func TestRedTeam14TermEndsDuringCopyIn(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt14term")
	old, resign := e.lead(t, "rt14term")
	z := rt9Via(t, e, "rt14term", old)
	if got := z.rt14Step('G', 1, 5*time.Second, &pgproto3.Query{String: "COPY rt14term (v) FROM STDIN"}); fmt.Sprint(got) != "[G]" {
		t.Fatalf("COPY: %q", got)
	}
	z.fe.Send(&pgproto3.CopyData{Data: []byte("zombie1\n")})
	if err := z.fe.Flush(); err != nil {
		t.Fatal(err)
	}
	resign()
	cur, _ := e.lead(t, "rt14term")
	l := e.connect(t, "rt14term", cur)
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := l.Exec(wctx, "INSERT INTO rt14term (v) VALUES ('leader')"); err != nil {
		t.Fatalf("the next leader's write waits for the zombie in copy-in: %v", err)
	}
	got := z.rt14Step('Z', 1, 5*time.Second, &pgproto3.CopyData{Data: []byte("zombie2\n")}, &pgproto3.CopyDone{})
	if len(got) == 0 || !strings.HasPrefix(got[0], "E:FG00") || !rt9Hung(got) || got[len(got)-1] == "TIMEOUT" {
		t.Errorf("zombie answered %q, want FATAL FG001/FG002 and the connection closed", got)
	}
	if vs := e.values(t, "rt14term"); len(vs) != 1 || vs[0] != "leader" {
		t.Fatalf("rows %q, want only the leader's", vs)
	}
}

// TestRedTeam14TerminatePipelined: a client that sends its last messages
// and Terminate in one write (CopyData, CopyDone, Terminate after a
// CopyInResponse; or a Query and Terminate) has them run by PostgreSQL,
// which reads and runs each message before the Terminate. clientLoop
// returns on the Terminate without flushing what it already wrote to its
// buffer for the server, and session.run closes the server connection:
// the COPY, its data complete, is never ended, and the INSERT never
// reaches the server. Found on the COPY path (Terminate during
// copy-in); not a fencing hole (fewer writes, none unfenced), but a
// drop-in client's completed write silently lost.
func TestRedTeam14TerminatePipelined(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt14bye")
	for _, tc := range []struct {
		name string
		run  func(c *rt9Conn)
	}{
		{"COPY", func(c *rt9Conn) {
			if got := c.rt14Step('G', 1, 5*time.Second, &pgproto3.Query{String: "COPY rt14bye (v) FROM STDIN"}); fmt.Sprint(got) != "[G]" {
				t.Fatalf("COPY: %q", got)
			}
			c.fe.Send(&pgproto3.CopyData{Data: []byte("a\n")})
			c.fe.Send(&pgproto3.CopyDone{})
			c.fe.Send(&pgproto3.Terminate{})
		}},
		{"Query", func(c *rt9Conn) {
			c.fe.Send(&pgproto3.Query{String: "INSERT INTO rt14bye (v) VALUES ('a')"})
			c.fe.Send(&pgproto3.Terminate{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := func(c *rt9Conn) int {
				e.table(t, "rt14bye")
				tc.run(c)
				if err := c.fe.Flush(); err != nil {
					t.Fatal(err)
				}
				// Until the connection is closed: the server has read
				// the Terminate, after what came before it.
				_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.Copy(io.Discard, c.conn)
				n := 0
				eventually(func() bool { n = e.count(t, "rt14bye"); return n > 0 })
				return n
			}
			want := rows(rt9Direct(t))
			got := rows(rt9Via(t, e, "rt14bye", tok))
			if got != want {
				t.Errorf("BROKEN: messages pipelined before Terminate: %d rows stored through fencegate, %d by PostgreSQL directly", got, want)
			}
		})
	}
}
