package pgwire_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt5Conn is a hand-driven connection: through fencegate (raw) or to
// PostgreSQL itself, to compare their answers.
type rt5Conn struct {
	t  *testing.T
	fe *pgproto3.Frontend
	c  interface{ SetReadDeadline(time.Time) error }
}

func rt5Direct(t *testing.T) *rt5Conn {
	t.Helper()
	pc, err := pgconn.Connect(t.Context(), pgServer.DSN())
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return &rt5Conn{t: t, fe: hc.Frontend, c: hc.Conn}
}

func rt5Via(z *rawConn) *rt5Conn { return &rt5Conn{t: z.t, fe: z.fe, c: z.conn} }

// run sends msgs and returns, up to n ReadyForQuery, each answer as a
// short string: tags, errors (E:code), rows (D:value), Z:status.
func (r *rt5Conn) run(n int, msgs ...pgproto3.FrontendMessage) []string {
	r.t.Helper()
	for _, m := range msgs {
		r.fe.Send(m)
	}
	if err := r.fe.Flush(); err != nil {
		r.t.Fatal(err)
	}
	_ = r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer func() { _ = r.c.SetReadDeadline(time.Time{}) }()
	var out []string
	for n > 0 {
		m, err := r.fe.Receive()
		if err != nil {
			r.t.Fatalf("%v (so far %q)", err, out)
		}
		switch m := m.(type) {
		case *pgproto3.CommandComplete:
			out = append(out, string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			out = append(out, "E:"+m.Code)
		case *pgproto3.DataRow:
			out = append(out, "D:"+string(m.Values[0]))
		case *pgproto3.ReadyForQuery:
			out = append(out, "Z:"+string(m.TxStatus))
			n--
		}
	}
	return out
}

// TestRedTeam5ReparseDropsParameterTypes: reparse prepares a named SET
// TRANSACTION again without the parameter types its Parse declared, so a
// Bind that supplies the parameters the client declared (valid: the
// server takes declared types whether or not the text uses them) is
// refused by the server (08P01: the statement now requires 0).
func TestRedTeam5ReparseDropsParameterTypes(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt5-ptypes")
	steps := func(c *rt5Conn) []string {
		var got []string
		got = append(got, c.run(1, &pgproto3.Parse{Name: "rt5_pt", Query: "SET TRANSACTION READ ONLY", ParameterOIDs: []uint32{23}}, &pgproto3.Sync{})...)
		got = append(got, c.run(1, &pgproto3.Query{String: "BEGIN"})...)
		got = append(got, c.run(1, &pgproto3.Bind{PreparedStatement: "rt5_pt", Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "SELECT current_setting('transaction_read_only')"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})...)
		got = append(got, c.run(1, &pgproto3.Query{String: "ROLLBACK"})...)
		return got
	}
	want := steps(rt5Direct(t))
	got := steps(rt5Via(e.raw(t, "rt5-ptypes", tok)))
	t.Logf("PostgreSQL: %q", want)
	t.Logf("fencegate:  %q", got)
	if !slices.Equal(got, want) {
		t.Errorf("BROKEN: a correct client's named SET TRANSACTION, parsed with a parameter type, answers %q through fencegate, %q from PostgreSQL", got, want)
	}
}

// TestRedTeam5CheckReplacesUnnamedPortal: the check fencegate inserts
// binds the unnamed portal, which may be the client's: a SET TRANSACTION
// READ ONLY bound to it (deferred, it runs before the check) and not yet
// executed when the check goes in front of the client's next Bind (or,
// past maxDeferrals, of its Execute). The client's Execute of the unnamed
// portal then runs fencegate's finished check portal ("SELECT 0"), its
// SET TRANSACTION never runs, and the write it meant to forbid is stored.
func TestRedTeam5CheckReplacesUnnamedPortal(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt5-portal")
	e.table(t, "rt5_portal")
	if _, err := e.admin.Exec(ctx, "ALTER TABLE rt5_portal OWNER TO worker"); err != nil {
		t.Fatal(err)
	}
	prepare := func(c *rt5Conn) []string {
		return c.run(1,
			&pgproto3.Parse{Name: "rt5_ro", Query: "SET TRANSACTION READ ONLY"},
			&pgproto3.Parse{Name: "rt5_iso", Query: "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"},
			&pgproto3.Parse{Name: "rt5_w", Query: "INSERT INTO rt5_portal (v) VALUES ('written')"},
			&pgproto3.Sync{})
	}
	cases := []struct {
		name  string
		steps func(c *rt5Conn) []string
	}{
		{"bind, bind, execute, execute", func(c *rt5Conn) []string {
			got := prepare(c)
			got = append(got, c.run(1, &pgproto3.Query{String: "BEGIN"})...)
			got = append(got, c.run(1,
				&pgproto3.Bind{PreparedStatement: "rt5_ro"}, &pgproto3.Bind{DestinationPortal: "rt5_wp", PreparedStatement: "rt5_w"},
				&pgproto3.Execute{}, &pgproto3.Execute{Portal: "rt5_wp"}, &pgproto3.Sync{})...)
			return append(got, c.run(1, &pgproto3.Query{String: "COMMIT"})...)
		}},
		{"past maxDeferrals", func(c *rt5Conn) []string {
			got := prepare(c)
			got = append(got, c.run(1, &pgproto3.Query{String: "BEGIN"})...)
			var m []pgproto3.FrontendMessage
			for range 14 { // with BEGIN, 15 deferrals
				m = append(m, &pgproto3.Bind{PreparedStatement: "rt5_iso"}, &pgproto3.Execute{})
			}
			m = append(m, &pgproto3.Bind{DestinationPortal: "rt5_a", PreparedStatement: "rt5_iso"}, &pgproto3.Bind{PreparedStatement: "rt5_ro"},
				&pgproto3.Execute{Portal: "rt5_a"}, &pgproto3.Execute{},
				&pgproto3.Bind{PreparedStatement: "rt5_w"}, &pgproto3.Execute{}, &pgproto3.Sync{})
			got = append(got, c.run(1, m...)...)
			return append(got, c.run(1, &pgproto3.Query{String: "COMMIT"})...)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.admin.Exec(ctx, "TRUNCATE rt5_portal"); err != nil {
				t.Fatal(err)
			}
			want := tc.steps(rt5Direct(t))
			got := tc.steps(rt5Via(e.raw(t, "rt5-portal", tok)))
			t.Logf("PostgreSQL: %q", want)
			t.Logf("fencegate:  %q", got)
			if n := len(e.values(t, "rt5_portal")); n != 0 {
				t.Errorf("BROKEN: %d rows written in a transaction the client set READ ONLY (PostgreSQL refuses the write: %q; fencegate: %q)", n, want, got)
			}
			if !slices.Equal(got, want) {
				t.Errorf("BROKEN: answers differ")
			}
		})
	}
}
