package pgwire_test

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// relayStep is what a client sends up to and including a Sync (or one
// simple Query), with the COPY data it sends when asked for it.
type relayStep struct {
	name string
	msgs []pgproto3.FrontendMessage
	copy [][]byte // CopyData sent after CopyInResponse, then CopyDone
}

func query(sql string) relayStep {
	return relayStep{name: sql, msgs: []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}}
}

func extended(name string, msgs ...pgproto3.FrontendMessage) relayStep {
	return relayStep{name: name, msgs: append(msgs, &pgproto3.Sync{})}
}

// TestRelayAsDirect runs one session's messages through the listener and
// straight to PostgreSQL, and requires the same backend messages, byte for
// byte, for each: the simple and extended protocols, named and unnamed
// statements and portals, row limits (PortalSuspended), binary results,
// errors inside a pipeline, notices, COPY in both directions, explicit
// transactions and savepoints, reported settings, SQL prepared statements
// and messages larger than the listener's buffers. fencegate inserts its check into
// every transaction and drops the check's replies; nothing of it may show.
// BackendKeyData (fencegate's own) is not compared.
func TestRelayAsDirect(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "relay")
	e.table(t, "relay_t")

	steps := []relayStep{
		query("INSERT INTO relay_t(v) VALUES ('a'), ('b') RETURNING v"),
		query("SELECT v, length(v), v || '!' AS bang FROM relay_t WHERE v = 'a'"),
		query("SELECT 1/0"),
		query(""),
		query("SELECT 1; SELECT 'two', NULL::int; UPDATE relay_t SET v = v WHERE false"),
		query("DO $$ BEGIN RAISE NOTICE 'hello %', 42; END $$"),
		query("SET application_name = 'relay-test'"),
		query("SHOW application_name"),
		query("BEGIN"),
		query("INSERT INTO relay_t(v) VALUES ('in-tx')"),
		query("SELECT count(*) FROM relay_t WHERE v = 'in-tx'"),
		query("COMMIT"),
		query("BEGIN"),
		query("SELECT nope"),
		query("SELECT 1"), // in a failed transaction
		query("ROLLBACK"),
		extended("unnamed, described portal",
			&pgproto3.Parse{Query: "SELECT $1::int + 1 AS n"},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("41")}},
			&pgproto3.Describe{ObjectType: 'P'},
			&pgproto3.Execute{}),
		extended("binary result",
			&pgproto3.Parse{Query: "SELECT $1::int8 * 2, 'x'::text"},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("21")}, ResultFormatCodes: []int16{1, 0}},
			&pgproto3.Describe{ObjectType: 'P'},
			&pgproto3.Execute{}),
		extended("named statement",
			&pgproto3.Parse{Name: "ins", Query: "INSERT INTO relay_t(v) VALUES ($1) RETURNING v, length(v)"},
			&pgproto3.Describe{ObjectType: 'S', Name: "ins"}),
		extended("named statement, executed twice in one pipeline",
			&pgproto3.Bind{PreparedStatement: "ins", Parameters: [][]byte{[]byte("p1")}},
			&pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "ins", Parameters: [][]byte{[]byte("p22")}},
			&pgproto3.Execute{}),
		extended("row limit",
			&pgproto3.Parse{Query: "SELECT g FROM generate_series(1, 5) AS g"},
			&pgproto3.Bind{DestinationPortal: "cur"},
			&pgproto3.Execute{Portal: "cur", MaxRows: 2},
			&pgproto3.Execute{Portal: "cur", MaxRows: 2},
			&pgproto3.Execute{Portal: "cur"}),
		extended("error mid-pipeline skips to Sync",
			&pgproto3.Parse{Query: "SELECT 1/0"},
			&pgproto3.Bind{},
			&pgproto3.Execute{},
			&pgproto3.Parse{Query: "SELECT 1"},
			&pgproto3.Bind{},
			&pgproto3.Execute{}),
		extended("close",
			&pgproto3.Close{ObjectType: 'S', Name: "ins"},
			&pgproto3.Describe{ObjectType: 'S', Name: "ins"}),
		extended("empty query, extended",
			&pgproto3.Parse{Query: ""},
			&pgproto3.Bind{},
			&pgproto3.Execute{}),
		{
			name: "COPY FROM STDIN", msgs: []pgproto3.FrontendMessage{&pgproto3.Query{String: "COPY relay_t(v) FROM STDIN"}},
			copy: [][]byte{[]byte("c1\nc2\n"), []byte("c3\n")},
		},
		query("SELECT string_agg(v, ',' ORDER BY v) FROM relay_t WHERE v LIKE 'c%'"),
		query("COPY (SELECT v FROM relay_t WHERE v LIKE 'c%' ORDER BY v) TO STDOUT"),
		query("RESET application_name"),
		// messages larger than the listener's read buffers, both ways
		query("SELECT repeat('x', 300000) AS big"),
		extended("large parameter and NULL",
			&pgproto3.Parse{Query: "SELECT length($1::text), $2::text IS NULL"},
			&pgproto3.Bind{Parameters: [][]byte{bytes.Repeat([]byte("y"), 300000), nil}},
			&pgproto3.Execute{}),
		query("SELECT * FROM relay_missing"),
		query("BEGIN"),
		query("SAVEPOINT s"),
		query("INSERT INTO relay_t(v) VALUES ('sp')"),
		query("ROLLBACK TO SAVEPOINT s"),
		query("RELEASE s"),
		query("COMMIT"),
		query("PREPARE relay_q(text) AS SELECT $1 || '?'"),
		query("EXECUTE relay_q('why')"),
		query("DEALLOCATE relay_q"),
	}

	direct := dialPG(t, pgServer.Port(), nil)
	viaFG := dialPG(t, mustAtoi(t, e.port), map[string]string{"options": fmt.Sprintf("-c fencegate.fence=relay -c fencegate.token=%d", tok)})
	for _, st := range steps {
		got, want := viaFG.run(t, st), direct.run(t, st)
		if len(got) != len(want) {
			t.Errorf("%s: got %d messages, want %d\n fencegate: %q\n    direct: %q", st.name, len(got), len(want), got, want)
			continue
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%s: message %d\n fencegate: %q\n    direct: %q", st.name, i, got[i], want[i])
			}
		}
	}
	// Both sessions wrote the same rows.
	if n := e.count(t, "relay_t"); n != 2*8 {
		t.Errorf("relay_t holds %d rows, want %d (8 from each session)", n, 2*8)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pgSession is a raw protocol session as user worker.
type pgSession struct {
	c  net.Conn
	fe *pgproto3.Frontend
}

func dialPG(t *testing.T, port int, params map[string]string) *pgSession {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &pgSession{c: c, fe: pgproto3.NewFrontend(c, c)}
	p := map[string]string{"user": "worker", "database": "postgres"}
	for k, v := range params {
		p[k] = v
	}
	s.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: p})
	if err := s.fe.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		m, err := s.fe.Receive()
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.ErrorResponse:
			t.Fatalf("startup: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return s
		}
	}
}

// run sends a step and returns the backend's messages up to its
// ReadyForQuery, encoded.
func (s *pgSession) run(t *testing.T, st relayStep) [][]byte {
	t.Helper()
	for _, m := range st.msgs {
		s.fe.Send(m)
	}
	if err := s.fe.Flush(); err != nil {
		t.Fatalf("%s: %v", st.name, err)
	}
	var out [][]byte
	for {
		_ = s.c.SetDeadline(time.Now().Add(10 * time.Second))
		m, err := s.fe.Receive()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		b, err := m.Encode(nil)
		if err != nil {
			t.Fatalf("%s: encode %T: %v", st.name, m, err)
		}
		out = append(out, b)
		switch m.(type) {
		case *pgproto3.CopyInResponse:
			for _, d := range st.copy {
				s.fe.Send(&pgproto3.CopyData{Data: d})
			}
			s.fe.Send(&pgproto3.CopyDone{})
			if err := s.fe.Flush(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		case *pgproto3.ReadyForQuery:
			return out
		}
	}
}
