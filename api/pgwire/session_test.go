package pgwire_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/internal/listen"
	"github.com/fencegate/fencegate/api/pgwire"
)

// TestAuthRelay: the database authenticates the client through fencegate
// with SCRAM-SHA-256, MD5 and cleartext passwords; a wrong password is
// refused by the database.
func TestAuthRelay(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "authed")
	methods := []struct{ role, method, encryption string }{
		{"scram_user", "scram-sha-256", "scram-sha-256"},
		{"md5_user", "md5", "md5"},
		{"pw_user", "password", "scram-sha-256"},
	}
	var hba strings.Builder
	for _, m := range methods {
		if _, err := pgServer.ListenerRole(ctx, m.role); err != nil {
			t.Fatal(err)
		}
		for _, sql := range []string{
			"SET password_encryption = '" + m.encryption + "'",
			"ALTER ROLE " + m.role + " PASSWORD 'secret-" + m.role + "'",
			"GRANT INSERT, SELECT ON authed TO " + m.role,
			"GRANT USAGE ON SEQUENCE authed_id_seq TO " + m.role,
		} {
			if _, err := e.admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		fmt.Fprintf(&hba, "host all %s 127.0.0.1/32 %s\n", m.role, m.method)
	}
	path := filepath.Join(pgServer.DataDir(), "pg_hba.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte(hba.String()), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(path, old, 0o600)
		_, _ = e.admin.Exec(context.WithoutCancel(t.Context()), "SELECT pg_reload_conf()")
	})
	if _, err := e.admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the postmaster reloads asynchronously
	tok, _ := e.lead(t, "authed")
	for _, m := range methods {
		t.Run(m.method, func(t *testing.T) {
			dsn := fmt.Sprintf("postgres://%s:secret-%s@%s/postgres?sslmode=disable&fencegate.fence=authed&fencegate.token=%d", m.role, m.role, e.addr, tok)
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("right password: %v", err)
			}
			defer c.Close(ctx)
			if _, err := c.Exec(ctx, "INSERT INTO authed (v) VALUES ($1)", m.role); err != nil {
				t.Fatal(err)
			}
			wrong := strings.Replace(dsn, ":secret-", ":wrong-", 1)
			_, err = pgx.Connect(ctx, wrong)
			wantCode(t, err, "28P01") // invalid_password, from the database
		})
	}
	if got := e.count(t, "authed"); got != len(methods) {
		t.Fatalf("got %d rows, want %d", got, len(methods))
	}
	// Before the database has logged a client in, fencegate takes a
	// message of at most 65535 bytes from it, as PostgreSQL does: a
	// client must not make it hold a password message's claimed length.
	t.Run("password message over the limit", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		startup, err := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{
			"user": "md5_user", "database": "postgres", "fencegate.fence": "authed", "fencegate.token": fmt.Sprint(tok),
		}}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(startup); err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fe := pgproto3.NewFrontend(c, c)
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := msg.(*pgproto3.AuthenticationMD5Password); !ok {
			t.Fatalf("got %T, want the database's AuthenticationMD5Password", msg)
		}
		// A password message claiming 64 MiB, of which 1 KiB comes.
		claim := []byte{'p', 0, 0, 0, 0}
		binary.BigEndian.PutUint32(claim[1:], 64<<20)
		if _, err := c.Write(append(claim, make([]byte, 1<<10)...)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("fencegate kept the connection waiting for the claimed message: %v", err)
		}
	})
}

// TestCancel: a client's CancelRequest, with the key fencegate gave it,
// cancels its statement on its own server connection.
func TestCancel(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "cancel")
	other := e.connect(t, "cancel", tok)
	c := e.connect(t, "cancel", tok)
	if pid := c.PgConn().PID(); pid == 0 {
		t.Fatal("no key data")
	}
	var serverPID uint32
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&serverPID); err != nil {
		t.Fatal(err)
	}
	if serverPID == c.PgConn().PID() {
		t.Fatalf("the client got the server's own process id %d, want fencegate's", serverPID)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = c.PgConn().CancelRequest(ctx)
	}()
	start := time.Now()
	_, err := c.Exec(ctx, "SELECT pg_sleep(20)")
	wantCode(t, err, "57014") // query_canceled
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("cancelled after %v", d)
	}
	// PostgreSQL's postmaster signals a cancelled backend and its process
	// group (signal_child), so the signal can land twice, the second time
	// on the cancelled session's next statement: one more 57014 there is
	// PostgreSQL's, as on a direct connection. The other session's
	// statement is never cancelled.
	if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
		wantCode(t, err, "57014")
		t.Logf("the cancelled session's next statement: %v (the cancel's second signal)", err)
	}
	for _, conn := range []*pgx.Conn{c, other} {
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("after the cancel: %v", err)
		}
	}
}

// TestStartupRefused: a connection without fence or token, or logged in
// as a superuser, is refused at its start with one FATAL line.
func TestStartupRefused(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	cases := []struct {
		name, dsn, code, msg string
	}{
		{"no token", fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable&fencegate.fence=jobs", e.addr), "FG004", "MISSING_TOKEN"},
		{"bad token", fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable&fencegate.fence=jobs&fencegate.token=-1", e.addr), "FG004", "INVALID_TOKEN"},
		{"no fence", fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable&fencegate.token=1", e.addr), "FG006", "no fence"},
		{"bad fence", fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable&fencegate.fence=a/b&fencegate.token=1", e.addr), "FG006", "fence name"},
		{"other setting", fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable&fencegate.fence=jobs&fencegate.token=1&fencegate.fenced=x", e.addr), "FG006", "unknown setting"},
		{"superuser", e.dsn("postgres", "jobs", 1), "FG006", "superuser"},
		{"options", fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable&options=%s", e.addr, optEscape("-c fencegate.fence=jobs")), "FG004", "MISSING_TOKEN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := pgx.Connect(ctx, tc.dsn)
			if err == nil {
				c.Close(ctx)
				t.Fatal("connected")
			}
			pe := wantCode(t, err, tc.code)
			if !strings.Contains(pe.Message, tc.msg) || pe.Severity != "FATAL" {
				t.Fatalf("got %s %q, want FATAL containing %q", pe.Severity, pe.Message, tc.msg)
			}
		})
	}
	// The options form works.
	tok, _ := e.lead(t, "opts")
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://worker@%s/postgres?sslmode=disable&options=%s", e.addr, optEscape(fmt.Sprintf("-c fencegate.fence=opts --fencegate.token=%d -c application_name=kept", tok))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var app string
	if err := c.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app); err != nil {
		t.Fatal(err)
	}
	if app != "kept" {
		t.Fatalf("got application_name %q, want the rest of options passed on", app)
	}
}

func optEscape(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// TestShutdown: Shutdown closes idle sessions at once and lets a session
// in a transaction finish it.
func TestShutdown(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "sd")
	tok, _ := e.lead(t, "sd")
	idle := e.connect(t, "sd", tok)
	busy := e.connect(t, "sd", tok)
	if _, err := busy.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := busy.Exec(ctx, "INSERT INTO sd (v) VALUES ('1')"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(sctx)
	}()
	time.Sleep(300 * time.Millisecond)
	if _, err := idle.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("an idle session survived Shutdown")
	}
	if _, err := busy.Exec(ctx, "INSERT INTO sd (v) VALUES ('2')"); err != nil {
		t.Fatalf("in a transaction during Shutdown: %v", err)
	}
	if _, err := busy.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT during Shutdown: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after the last transaction ended")
	}
	if got := e.count(t, "sd"); got != 2 {
		t.Fatalf("got %d rows, want 2", got)
	}
}

// TestLargeMessages: messages larger than the read buffer (a long query,
// large COPY data, large parameters and rows) pass whole.
func TestLargeMessages(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "big")
	tok, _ := e.lead(t, "big")
	c := e.connect(t, "big", tok)
	large := strings.Repeat("x", 200<<10)
	if _, err := c.Exec(ctx, "INSERT INTO big (v) VALUES ('"+large+"')"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO big (v) VALUES ($1)", large); err != nil {
		t.Fatal(err)
	}
	rows := make([][]any, 50)
	for i := range rows {
		rows[i] = []any{large[:10<<10]}
	}
	if _, err := c.CopyFrom(ctx, pgx.Identifier{"big"}, []string{"v"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT sum(length(v)) FROM big WHERE length(v) > $1", 0).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := 2*len(large) + 50*(10<<10); n != want {
		t.Fatalf("got %d bytes stored, want %d", n, want)
	}
	var back string
	if err := c.QueryRow(ctx, "SELECT v FROM big ORDER BY id LIMIT 1").Scan(&back); err != nil || back != large {
		t.Fatalf("got %d bytes back (%v), want %d", len(back), err, len(large))
	}
}

// TestStreamedMessages: COPY data, rows and Bind messages larger than the
// read buffer pass through as they arrive, so the listener's limit on the
// messages it holds whole (MaxMessage, here 1 MiB) does not bound them,
// as the database's own does not at that size; a message it must read is
// still bounded, and a zombie's COPY data and parameters are dropped
// unread.
func TestStreamedMessages(t *testing.T) {
	ctx := t.Context()
	const limit = 1 << 20
	e := newEnv(t, pgwire.Config{MaxMessage: limit})
	e.table(t, "streamed")
	stale, resign := e.lead(t, "streamed")
	resign()
	tok, _ := e.lead(t, "streamed")
	large := strings.Repeat("s", 3*limit)
	// openInsert opens a connection by hand, with a transaction open in
	// which v is inserted, and returns it and its backend's pid.
	openInsert := func(t *testing.T, v string) (net.Conn, *pgproto3.Frontend, string) {
		t.Helper()
		conn, fe := e.send(t, "streamed", tok,
			&pgproto3.Query{String: "BEGIN; INSERT INTO streamed (v) VALUES ('" + v + "'); SELECT pg_backend_pid()"})
		rows := receiveRows(t, fe)
		if len(rows) != 1 {
			t.Fatalf("got rows %q, want the backend's pid", rows)
		}
		return conn, fe, rows[0]
	}

	// COPY FROM STDIN with one CopyData of 3 MiB, by hand (pgx sends
	// COPY data in 64 KiB messages).
	copyIn := func(t *testing.T, token uint64) []pgproto3.BackendMessage {
		t.Helper()
		conn := e.hijack(t, "streamed", token)
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		fe := pgproto3.NewFrontend(conn, conn)
		fe.Send(&pgproto3.Query{String: "COPY streamed (v) FROM STDIN"})
		fe.Send(&pgproto3.CopyData{Data: []byte(large + "\n")})
		fe.Send(&pgproto3.CopyDone{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		var got []pgproto3.BackendMessage
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatalf("after %d messages: %v", len(got), err)
			}
			switch m := m.(type) {
			case *pgproto3.ReadyForQuery:
				return got
			case *pgproto3.ErrorResponse:
				got = append(got, &pgproto3.ErrorResponse{Code: m.Code, Message: m.Message})
			case *pgproto3.CommandComplete:
				got = append(got, &pgproto3.CommandComplete{CommandTag: append([]byte(nil), m.CommandTag...)})
			}
		}
	}
	t.Run("zombie's COPY data", func(t *testing.T) {
		got := copyIn(t, stale)
		if len(got) != 1 {
			t.Fatalf("got %d answers, want one error", len(got))
		}
		if er, ok := got[0].(*pgproto3.ErrorResponse); !ok || er.Code != "FG001" {
			t.Fatalf("got %#v, want error FG001", got[0])
		}
		if n := e.count(t, "streamed"); n != 0 {
			t.Fatalf("a zombie's COPY stored %d rows", n)
		}
	})
	t.Run("COPY data from the client", func(t *testing.T) {
		got := copyIn(t, tok)
		if len(got) != 1 {
			t.Fatalf("got %d answers, want COPY 1", len(got))
		}
		if cc, ok := got[0].(*pgproto3.CommandComplete); !ok || string(cc.CommandTag) != "COPY 1" {
			t.Fatalf("got %#v, want COPY 1", got[0])
		}
	})
	t.Run("zombie's parameter", func(t *testing.T) {
		z := e.connect(t, "streamed", stale)
		_, err := z.Exec(ctx, "INSERT INTO streamed (v) VALUES ($1)", large)
		wantCode(t, err, "FG001")
		if n := e.count(t, "streamed"); n != 1 {
			t.Fatalf("got %d rows, want 1", n)
		}
	})
	c := e.connect(t, "streamed", tok)
	t.Run("a parameter from the client", func(t *testing.T) {
		if _, err := c.Exec(ctx, "INSERT INTO streamed (v) VALUES ($1)", large); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, "streamed"); n != 2 {
			t.Fatalf("got %d rows, want 2", n)
		}
	})
	t.Run("a large Bind of SHOW fencegate.token", func(t *testing.T) {
		// fencegate answers SHOW fencegate.token itself, and reads its
		// Bind whole: one too large for the buffer is refused (the
		// database refuses 20000 result formats for one column too).
		if _, err := c.PgConn().Prepare(ctx, "show_token", "SHOW fencegate.token", nil); err != nil {
			t.Fatal(err)
		}
		res := c.PgConn().ExecPrepared(ctx, "show_token", nil, nil, make([]int16, 20000)).Read()
		wantCode(t, res.Err, "FG006")
	})
	t.Run("a row to the client", func(t *testing.T) {
		var back string
		if err := c.QueryRow(ctx, "SELECT v FROM streamed ORDER BY id DESC LIMIT 1").Scan(&back); err != nil || back != large {
			t.Fatalf("got %d bytes back (%v), want %d", len(back), err, len(large))
		}
	})
	t.Run("COPY data to the client", func(t *testing.T) {
		var out strings.Builder
		tag, err := c.PgConn().CopyTo(ctx, &out, "COPY (SELECT v FROM streamed ORDER BY id LIMIT 1) TO STDOUT")
		if err != nil || tag.RowsAffected() != 1 || out.String() != large+"\n" {
			t.Fatalf("got %d bytes, %v, %v; want %d", out.Len(), tag, err, len(large)+1)
		}
	})
	t.Run("a statement over the limit", func(t *testing.T) {
		_, err := c.Exec(ctx, "INSERT INTO streamed (v) VALUES ('"+large+"')")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "FG006" || pe.Severity != "FATAL" || !strings.Contains(pe.Message, "over fencegate's limit of 1048576 bytes") {
			t.Fatalf("a 3 MiB Query with a 1 MiB limit: got %v, want FATAL FG006 naming the limit", err)
		}
		if n := e.count(t, "streamed"); n != 2 {
			t.Fatalf("got %d rows, want 2", n)
		}
	})
	t.Run("a statement over the limit, the rest never sent", func(t *testing.T) {
		// The client reads the FATAL and the end of the stream at once;
		// fencegate waits for the rest of the message at most
		// listen.LingerTime, then its transaction ends with the
		// connection: a client cannot hold it open by stalling.
		conn, fe, pid := openInsert(t, "stalled")
		head := []byte{'Q', 0, 0, 0, 0}
		binary.BigEndian.PutUint32(head[1:], uint32(4+len(large)+1))
		if _, err := conn.Write(append(head, large[:1024]...)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		m, err := fe.Receive()
		if er, ok := m.(*pgproto3.ErrorResponse); err != nil || !ok || er.Severity != "FATAL" || er.Code != "FG006" {
			t.Fatalf("a stalled 3 MiB Query: got %#v, %v, want FATAL FG006", m, err)
		}
		if _, err := fe.Receive(); !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Fatalf("after the FATAL: got %v, want the end of the stream", err)
		}
		e.waitFor(t, "SELECT 1 - count(*) FROM pg_stat_activity WHERE pid = $1::int", pid)
		if waited := time.Since(start); waited > listen.LingerTime+3*time.Second {
			t.Errorf("the backend ended %v after the FATAL, want within about %v", waited, listen.LingerTime)
		}
		if n := e.count(t, "streamed"); n != 2 {
			t.Fatalf("got %d rows, want 2", n)
		}
	})
	t.Run("client gone in the middle of a large Bind", func(t *testing.T) {
		// Part of the Bind has reached the database when the client
		// leaves: the server connection closes, so the open transaction
		// (an INSERT in it) is rolled back, not left holding the row's
		// locks for the next caller.
		conn, _, pid := openInsert(t, "gone")
		parse, err := (&pgproto3.Parse{Query: "INSERT INTO streamed (v) VALUES ($1)"}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		bind, err := (&pgproto3.Bind{Parameters: [][]byte{[]byte(large)}}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(append(parse, bind[:len(bind)/2]...)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		e.waitFor(t, "SELECT 1 - count(*) FROM pg_stat_activity WHERE pid = $1::int", pid)
		if n := e.count(t, "streamed"); n != 2 {
			t.Fatalf("got %d rows, want 2", n)
		}
	})
	t.Run("COPY data outside COPY", func(t *testing.T) {
		// Passed on unread, and ignored by the database as outside a
		// COPY it ignores all COPY data; the session goes on.
		_, fe := e.send(t, "streamed", tok,
			&pgproto3.CopyData{Data: []byte(large)}, &pgproto3.Query{String: "SELECT count(*) FROM streamed"})
		if rows := receiveRows(t, fe); len(rows) != 1 || rows[0] != "2" {
			t.Fatalf("got rows %q, want one row of 2", rows)
		}
	})
}

// send opens a connection of fence with token tok, logged in, and sends
// msgs on it by hand; the connection's deadline is 30 s away.
func (e *env) send(t *testing.T, fence string, tok uint64, msgs ...pgproto3.FrontendMessage) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	conn := e.hijack(t, fence, tok)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fe := pgproto3.NewFrontend(conn, conn)
	for _, m := range msgs {
		fe.Send(m)
	}
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	return conn, fe
}

// receiveRows reads the answers to a Query up to ReadyForQuery and returns
// the first column of its rows; an error answer fails the test.
func receiveRows(t *testing.T, fe *pgproto3.Frontend) []string {
	t.Helper()
	var rows []string
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("after %d rows: %v", len(rows), err)
		}
		switch m := m.(type) {
		case *pgproto3.DataRow:
			rows = append(rows, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			t.Fatalf("error %s: %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return rows
		}
	}
}

// TestSessionState: LISTEN/NOTIFY, session SET and prepared statements
// work as in a direct session.
func TestSessionState(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "state")
	c := e.connect(t, "state", tok)
	if _, err := c.Exec(ctx, "LISTEN jobs_done"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Exec(ctx, "NOTIFY jobs_done, 'hello'"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := c.WaitForNotification(wctx)
	if err != nil || n.Payload != "hello" {
		t.Fatalf("got %v, %v, want the notification", n, err)
	}
	var adminPID uint32
	if err := e.admin.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&adminPID); err != nil {
		t.Fatal(err)
	}
	if n.PID != adminPID {
		t.Errorf("another session's notification: got process id %d, want its sender's, %d", n.PID, adminPID)
	}
	// A client knows its own notifications by the process id of its
	// connection (pgx's PgConn().PID(), libpq's PQbackendPID), as in a
	// direct session.
	if _, err := c.Exec(ctx, "NOTIFY jobs_done, 'self'"); err != nil {
		t.Fatal(err)
	}
	if n, err = c.WaitForNotification(wctx); err != nil || n.Payload != "self" {
		t.Fatalf("got %v, %v, want the session's own notification", n, err)
	}
	if n.PID != c.PgConn().PID() {
		t.Errorf("the session's own notification: got process id %d, want its connection's, %d", n.PID, c.PgConn().PID())
	}
	if _, err := c.Exec(ctx, "SET application_name = 'through-fencegate'"); err != nil {
		t.Fatal(err)
	}
	var app string
	if err := c.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app); err != nil || app != "through-fencegate" {
		t.Fatalf("got %q, %v, want the session's SET to hold", app, err)
	}
	if _, err := c.Exec(ctx, "PREPARE q(int) AS SELECT $1 + 1"); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := c.QueryRow(ctx, "EXECUTE q(41)").Scan(&v); err != nil || v != 42 {
		t.Fatalf("got %d, %v, want 42 from a SQL prepared statement", v, err)
	}
}

// TestResetAll: RESET ALL resets the session's settings as in a direct
// session, in the simple and the extended protocol, alone, last in a
// string (asyncpg's pool runs its reset so at every release) or in a
// block; fencegate's token stays; and the transaction it is in is fenced
// like any other (a zombie's is refused and writes nothing).
func TestResetAll(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "resetall")
	old, resign := e.lead(t, "resetall")
	resign()
	cur, _ := e.lead(t, "resetall")
	c := e.connect(t, "resetall", cur)
	setting := func() string {
		t.Helper()
		var v string
		if err := c.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"alone", func() error { _, err := c.PgConn().Exec(ctx, "RESET ALL").ReadAll(); return err }},
		{"asyncpg's reset", func() error {
			_, err := c.PgConn().Exec(ctx, "SELECT pg_advisory_unlock_all();\nCLOSE ALL;\n"+
				"DO $$ BEGIN PERFORM * FROM pg_listening_channels() LIMIT 1; IF FOUND THEN UNLISTEN *; END IF; END; $$;\nRESET ALL;").ReadAll()
			return err
		}},
		{"extended", func() error {
			_, err := c.PgConn().ExecParams(ctx, "RESET ALL", nil, nil, nil, nil).Close()
			return err
		}},
		{"in a block, between writes", func() error {
			_, err := c.PgConn().Exec(ctx, "BEGIN; INSERT INTO resetall (v) VALUES ('before'); RESET ALL; INSERT INTO resetall (v) VALUES ('after'); COMMIT").ReadAll()
			return err
		}},
	} {
		if _, err := c.Exec(ctx, "SET application_name = 'set'"); err != nil {
			t.Fatal(err)
		}
		if err := tc.run(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := setting(); got != "" {
			t.Fatalf("%s: application_name is %q after RESET ALL, want it reset", tc.name, got)
		}
		var tok string
		if err := c.QueryRow(ctx, "SHOW fencegate.token").Scan(&tok); err != nil || tok != fmt.Sprint(cur) {
			t.Fatalf("%s: SHOW fencegate.token: got %q, %v, want %d", tc.name, tok, err, cur)
		}
	}
	if got := e.values(t, "resetall"); fmt.Sprint(got) != "[before after]" {
		t.Fatalf("got rows %q, want before and after", got)
	}
	z := e.connect(t, "resetall", old)
	_, err := z.PgConn().Exec(ctx, "RESET ALL; INSERT INTO resetall (v) VALUES ('zombie')").ReadAll()
	wantCode(t, err, "FG001")
	_, err = z.PgConn().Exec(ctx, "INSERT INTO resetall (v) VALUES ('zombie'); RESET ALL").ReadAll()
	wantCode(t, err, "FG001")
	if got := e.count(t, "resetall"); got != 2 {
		t.Fatalf("got %d rows after the zombie's, want 2", got)
	}
}

// TestDiscardAll: DISCARD ALL, which PostgreSQL runs only outside a
// transaction (Npgsql's pool sends it when a pooled connection is opened
// again, PgBouncer and Pgpool-II as their reset), runs as the statements
// it is made of, inside a fenced transaction: a zombie's is refused and
// resets nothing; the leader's resets settings, prepared statements
// (fencegate's check included, prepared anew) and advisory locks, and
// answers DISCARD ALL. In a block it fails as on the database.
func TestDiscardAll(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "discard")
	cur, resign := e.lead(t, "discard")
	const lockKey = 4242
	dirty := func(c *pgx.Conn) {
		t.Helper()
		for _, sql := range []string{"SET application_name = 'dirty'", "PREPARE q AS SELECT 1", fmt.Sprintf("SELECT pg_advisory_lock(%d)", lockKey)} {
			if _, err := c.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}

	c := e.connect(t, "discard", cur)
	dirty(c)
	// A session of this term that will be a zombie's: named while its
	// token was current.
	z := e.connect(t, "discard", cur)
	if _, err := z.Exec(ctx, "SET application_name = 'dirty-zombie'", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	tag, err := c.PgConn().Exec(ctx, "DISCARD ALL").ReadAll()
	if err != nil {
		t.Fatalf("DISCARD ALL: %v", err)
	}
	if len(tag) != 1 || tag[0].CommandTag.String() != "DISCARD ALL" {
		t.Fatalf("DISCARD ALL: got %d results, want one tagged DISCARD ALL", len(tag))
	}
	var app string
	var prepared bool
	if err := c.QueryRow(ctx, "SELECT current_setting('application_name'), (SELECT count(*) > 0 FROM pg_prepared_statements)", pgx.QueryExecModeSimpleProtocol).Scan(&app, &prepared); err != nil {
		t.Fatal(err)
	}
	var locks int
	if err := e.admin.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1", lockKey).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if app != "" || prepared || locks != 0 {
		t.Fatalf("after DISCARD ALL: application_name %q, prepared statements %v, advisory locks %d; want all reset", app, prepared, locks)
	}
	var tok string
	if err := c.QueryRow(ctx, "SHOW fencegate.token", pgx.QueryExecModeSimpleProtocol).Scan(&tok); err != nil || tok != fmt.Sprint(cur) {
		t.Fatalf("SHOW fencegate.token: got %q, %v, want %d", tok, err, cur)
	}
	// The extended protocol's check, deallocated with the rest, is
	// prepared anew.
	if _, err := c.Exec(ctx, "INSERT INTO discard (v) VALUES ($1)", "leader"); err != nil {
		t.Fatalf("after DISCARD ALL: %v", err)
	}
	if _, err := c.PgConn().Exec(ctx, "BEGIN; DISCARD ALL").ReadAll(); wantCodeOf(err) != "25001" {
		t.Fatalf("DISCARD ALL in a block: got %v, want 25001 as on the database", err)
	}
	_, _ = c.PgConn().Exec(ctx, "ROLLBACK").ReadAll()

	resign()
	next, _ := e.lead(t, "discard")
	// The new leader writes: the mark moves whether or not the listener
	// has seen the new term yet.
	if _, err := e.connect(t, "discard", next).Exec(ctx, "INSERT INTO discard (v) VALUES ($1)", "next"); err != nil {
		t.Fatal(err)
	}
	_, err = z.PgConn().Exec(ctx, "DISCARD ALL").ReadAll()
	wantCode(t, err, "FG001")
	// Nothing of the zombie's session was reset: reading it needs a
	// transaction, which is fenced too, so ask the server's view.
	if err := e.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dirty-zombie'").Scan(&locks); err != nil || locks != 1 {
		t.Fatalf("the zombie's session after its refused DISCARD ALL: %d sessions named dirty (%v), want 1", locks, err)
	}
	if got := e.values(t, "discard"); fmt.Sprint(got) != "[leader next]" {
		t.Fatalf("got rows %q, want the leaders'", got)
	}
}

// TestTempTablesAndShow: temporary tables live as long as the session, as
// in a direct one; SHOW fencegate.token and fencegate.fence answer what
// the connection writes with, inside a transaction too; not beside
// another statement, nor in a failed block.
func TestTempTablesAndShow(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	if _, err := pgServer.ListenerRole(ctx, "temp_user"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Exec(ctx, "GRANT TEMPORARY ON DATABASE postgres TO temp_user"); err != nil {
		t.Fatal(err)
	}
	tok, _ := e.lead(t, "scratch")
	c, err := pgx.Connect(ctx, e.dsn("temp_user", "scratch", tok))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, sql := range []string{
		"CREATE TEMP TABLE notes (v int)",
		"INSERT INTO notes VALUES (1), (2)",
		"BEGIN",
		"CREATE TEMP TABLE gone (v int) ON COMMIT DROP",
		"INSERT INTO gone SELECT v FROM notes",
		"COMMIT",
	} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM notes").Scan(&n); err != nil || n != 2 {
		t.Fatalf("got %d rows in the temporary table (%v), want 2 from the earlier transactions", n, err)
	}
	if _, err := c.Exec(ctx, "SELECT * FROM gone"); err == nil {
		t.Fatal("the ON COMMIT DROP table outlived its transaction")
	}

	show := func(setting string) string {
		t.Helper()
		var v string
		if err := c.QueryRow(ctx, "SHOW "+setting, pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil {
			t.Fatalf("SHOW %s: %v", setting, err)
		}
		return v
	}
	if got, want := show("fencegate.token"), fmt.Sprint(tok); got != want {
		t.Errorf("SHOW fencegate.token: got %q, want %q", got, want)
	}
	if got := show("fencegate.fence"); got != "scratch" {
		t.Errorf("SHOW fencegate.fence: got %q, want scratch", got)
	}
	if _, err := c.Exec(ctx, fmt.Sprintf("SET fencegate.token = %d", tok+1)); err != nil {
		t.Fatal(err)
	}
	if got, want := show("fencegate.token"), fmt.Sprint(tok+1); got != want {
		t.Errorf("SHOW fencegate.token after SET: got %q, want %q", got, want)
	}
	if _, err := c.Exec(ctx, fmt.Sprintf("SET fencegate.token = %d", tok)); err != nil {
		t.Fatal(err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO notes VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	if got, want := show("fencegate.token"), fmt.Sprint(tok); got != want {
		t.Errorf("SHOW fencegate.token in a transaction: got %q, want %q", got, want)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after SHOW: %v", err)
	}
	// In a failed block, as every statement but those ending it: 25P02.
	if _, err := c.PgConn().Prepare(ctx, "show_before", "SHOW fencegate.token", nil); err != nil {
		t.Fatal(err)
	}
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 did not fail")
	}
	_, err = tx.Exec(ctx, "SHOW fencegate.token", pgx.QueryExecModeSimpleProtocol)
	wantCode(t, err, "25P02")
	// The same in the extended protocol: a Parse of it, unnamed or named,
	// and a Bind of one fencegate answered before the block. (pgx's Exec
	// without arguments is a simple Query whatever the mode.)
	pc := c.PgConn()
	for _, name := range []string{"", "show_in_block"} {
		_, err = pc.Prepare(ctx, name, "SHOW fencegate.fence", nil)
		wantCode(t, err, "25P02")
	}
	_, err = pc.ExecPrepared(ctx, "show_before", nil, nil, nil).Close()
	wantCode(t, err, "25P02")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Pipelined behind the statement that fails the block, each segment
	// waiting for the one before: every answer in order.
	if err := pc.Exec(ctx, "BEGIN").Close(); err != nil {
		t.Fatal(err)
	}
	p := pc.StartPipeline(ctx)
	p.SendQueryParams("SELECT 1/0", nil, nil, nil, nil)
	p.SendPipelineSync()
	p.SendPrepare("", "SHOW fencegate.token", nil)
	p.SendPipelineSync()
	p.SendQueryPrepared("show_before", nil, nil, nil)
	p.SendPipelineSync()
	p.SendQueryParams("SELECT 1", nil, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 8 {
		res, err := p.GetResults()
		if rr, ok := res.(*pgconn.ResultReader); ok {
			_, err = rr.Close()
		}
		switch {
		case err != nil:
			got = append(got, wantCodeOf(err))
		case res == nil:
			got = append(got, "nothing")
		default:
			got = append(got, fmt.Sprintf("%T", res))
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	const sync = "*pgconn.PipelineSync"
	if want := []string{"22012", sync, "25P02", sync, "25P02", sync, "25P02", sync}; !slices.Equal(got, want) {
		t.Errorf("pipelined in a failed block: got %q, want %q", got, want)
	}
	if err := pc.Exec(ctx, "ROLLBACK").Close(); err != nil {
		t.Fatal(err)
	}
	res := c.PgConn().ExecPrepared(ctx, "show_before", nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != fmt.Sprint(tok) {
		t.Errorf("SHOW fencegate.token prepared before the failed block, after it: got %q, %v, want %d", res.Rows, res.Err, tok)
	}
	// The Parses that failed in the block left no statement under
	// fencegate's name for the session's next statements: the client can
	// neither run one (26000 from the server, which holds none) nor make
	// one (refused by fencegate), and fencegate's next refusal is still
	// its own (a Parse under that name that the server would answer 42P05
	// if one were left).
	_, err = pc.ExecPrepared(ctx, "fencegate_refused", nil, nil, nil).Close()
	wantCode(t, err, "26000")
	_, err = pc.Prepare(ctx, "fencegate_refused", "SELECT 1", nil)
	if pe := wantCode(t, err, "FG006"); !strings.Contains(pe.Message, "fencegate's") {
		t.Errorf("a Parse under fencegate's name: got %q, want it refused as fencegate's name", pe.Message)
	}
	// pgx's default: a named prepared statement (TestExtendedSetAndShow).
	var s string
	if err := c.QueryRow(ctx, "SHOW fencegate.token").Scan(&s); err != nil || s != fmt.Sprint(tok) {
		t.Errorf("SHOW fencegate.token prepared: got %q, %v, want %d", s, err, tok)
	}
	err = c.QueryRow(ctx, "SHOW fencegate.token; SELECT 1", pgx.QueryExecModeSimpleProtocol).Scan(&s)
	wantCode(t, err, "FG006")
}

// TestExtendedSetAndShow: drivers that speak only the extended protocol
// (PgJDBC, Npgsql, pgx's describe-exec mode, asyncpg) change the token
// with SET fencegate.token and read it with SHOW, unnamed or named, alone
// between Syncs, outside a transaction block; fencegate answers them
// itself. Anywhere else they are refused, nothing is written and the
// token stays.
func TestExtendedSetAndShow(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "extset")
	old, resign := e.lead(t, "extset")
	resign()
	cur, _ := e.lead(t, "extset")
	pc := e.connect(t, "extset", old).PgConn()
	insert := func(v string) error {
		_, err := pc.ExecParams(ctx, "INSERT INTO extset (v) VALUES ($1)", [][]byte{[]byte(v)}, nil, nil, nil).Close()
		return err
	}
	setToken := func(tok string) error {
		_, err := pc.ExecParams(ctx, "SET fencegate.token = "+tok, nil, nil, nil, nil).Close()
		return err
	}
	show := func(name string, resultFormats ...int16) string {
		t.Helper()
		rr := pc.ExecParams(ctx, "SHOW "+name, nil, nil, nil, resultFormats).Read()
		if rr.Err != nil {
			t.Fatalf("SHOW %s: %v", name, rr.Err)
		}
		if len(rr.Rows) != 1 || len(rr.FieldDescriptions) != 1 || rr.CommandTag.String() != "SHOW" {
			t.Fatalf("SHOW %s: got %d rows, %d fields, tag %q", name, len(rr.Rows), len(rr.FieldDescriptions), rr.CommandTag)
		}
		if want := append(resultFormats, 0)[0]; rr.FieldDescriptions[0].Format != want {
			t.Fatalf("SHOW %s: got format %d, want %d", name, rr.FieldDescriptions[0].Format, want)
		}
		return string(rr.Rows[0][0])
	}

	wantCode(t, insert("zombie"), "FG001")
	if got := show("fencegate.token"); got != fmt.Sprint(old) {
		t.Fatalf("SHOW fencegate.token: got %q, want %d", got, old)
	}
	if err := setToken(fmt.Sprint(cur)); err != nil {
		t.Fatalf("SET fencegate.token: %v", err)
	}
	if got := show("fencegate.token", 1); got != fmt.Sprint(cur) {
		t.Fatalf("SHOW fencegate.token after SET: got %q, want %d", got, cur)
	}
	if got := show("fencegate.fence"); got != "extset" {
		t.Fatalf("SHOW fencegate.fence: got %q, want extset", got)
	}
	if err := insert("leader"); err != nil {
		t.Fatalf("after SET: %v", err)
	}

	// pgx's describe-exec mode: Parse and Describe of the unnamed
	// statement, Sync; then its Bind and Execute, Sync. The Bind is of
	// fencegate's SET, not of the statement the server holds as unnamed,
	// the INSERT before it, which would run again.
	if _, err := pc.ExecParams(ctx, "INSERT INTO extset (v) VALUES ('once')", nil, nil, nil, nil).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Prepare(ctx, "", fmt.Sprintf("SET fencegate.token = %d", old), nil); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if _, err := pc.ExecPrepared(ctx, "", nil, nil, nil).Close(); err != nil {
		t.Fatalf("ExecPrepared: %v", err)
	}
	if got := e.values(t, "extset"); len(got) != 2 {
		t.Fatalf("got rows %q, want leader and once", got)
	}
	if got := show("fencegate.token"); got != fmt.Sprint(old) {
		t.Fatalf("SHOW fencegate.token after describe-exec SET: got %q, want %d", got, old)
	}
	if err := setToken(fmt.Sprint(cur)); err != nil {
		t.Fatal(err)
	}

	// Named statements (asyncpg prepares every statement it runs with
	// arguments or fetches from, PgJDBC past prepareThreshold): Parse and
	// Describe in one segment, Bind and Execute in the next, as often as
	// the client likes, until it closes the statement.
	if _, err := pc.Prepare(ctx, "settok", fmt.Sprintf("SET fencegate.token = %d", old), nil); err != nil {
		t.Fatalf("Prepare named SET: %v", err)
	}
	sd, err := pc.Prepare(ctx, "showtok", "SHOW fencegate.token", nil)
	if err != nil {
		t.Fatalf("Prepare named SHOW: %v", err)
	}
	if len(sd.Fields) != 1 || sd.Fields[0].Name != "fencegate.token" {
		t.Fatalf("named SHOW's description: got %+v", sd.Fields)
	}
	showNamed := func() string {
		t.Helper()
		rr := pc.ExecPrepared(ctx, "showtok", nil, nil, nil).Read()
		if rr.Err != nil || len(rr.Rows) != 1 {
			t.Fatalf("named SHOW: got %v, %d rows", rr.Err, len(rr.Rows))
		}
		return string(rr.Rows[0][0])
	}
	for i := 0; i < 2; i++ {
		if _, err := pc.ExecPrepared(ctx, "settok", nil, nil, nil).Close(); err != nil {
			t.Fatalf("named SET: %v", err)
		}
		if got := showNamed(); got != fmt.Sprint(old) {
			t.Fatalf("named SHOW after named SET: got %q, want %d", got, old)
		}
		wantCode(t, insert("zombie again"), "FG001")
		if err := setToken(fmt.Sprint(cur)); err != nil {
			t.Fatal(err)
		}
		if got := showNamed(); got != fmt.Sprint(cur) {
			t.Fatalf("named SHOW: got %q, want %d", got, cur)
		}
	}
	if err := pc.Deallocate(ctx, "settok"); err != nil {
		t.Fatalf("Close of the named SET: %v", err)
	}
	// Closed, it is gone, as on the server: 26000 invalid statement name.
	_, err = pc.ExecPrepared(ctx, "settok", nil, nil, nil).Close()
	wantCode(t, err, "26000")
	if got := showNamed(); got != fmt.Sprint(cur) {
		t.Fatalf("after the Close: the token is %s, want %d", got, cur)
	}

	// In a block (asyncpg's and pgx's transactions), SHOW too; the
	// block goes on.
	if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if got := show("fencegate.token"); got != fmt.Sprint(cur) {
		t.Fatalf("SHOW in a block: got %q, want %d", got, cur)
	}
	if got := showNamed(); got != fmt.Sprint(cur) {
		t.Fatalf("named SHOW in a block: got %q, want %d", got, cur)
	}
	if err := insert("in a block, after SHOW"); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if got := e.countLike(t, "extset", "in a block, after SHOW"); got != 1 {
		t.Fatalf("the block's row: got %d stored, want 1", got)
	}

	batch := func(sqls ...string) func() error {
		return func() error {
			b := &pgconn.Batch{}
			for _, sql := range sqls {
				b.ExecParams(sql, nil, nil, nil, nil)
			}
			_, err := pc.ExecBatch(ctx, b).ReadAll()
			return err
		}
	}
	inBlock := func(sql string) func() error {
		return func() error {
			if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
				return err
			}
			_, err := pc.ExecParams(ctx, sql, nil, nil, nil, nil).Close()
			_ = insert("in block")
			_, _ = pc.Exec(ctx, "COMMIT").ReadAll()
			return err
		}
	}
	for _, tc := range []struct {
		name, code string
		run        func() error
	}{
		{"named in a block", "FG006", func() error {
			if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
				return err
			}
			_, err := pc.Prepare(ctx, "settok2", "SET fencegate.token = 1", nil)
			_, _ = pc.Exec(ctx, "ROLLBACK").ReadAll()
			return err
		}},
		{"after a statement", "FG006", batch("INSERT INTO extset (v) VALUES ('batch')", "SET fencegate.token = 1")},
		{"before a statement", "FG006", batch("SET fencegate.token = 1", "INSERT INTO extset (v) VALUES ('batch')")},
		{"SHOW before a statement", "FG006", batch("SHOW fencegate.token", "INSERT INTO extset (v) VALUES ('batch')")},
		{"in a block", "FG006", inBlock("SET fencegate.token = 1")},
		{"SHOW with a parameter in a block", "FG006", func() error {
			if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
				return err
			}
			_, err := pc.ExecParams(ctx, "SHOW fencegate.token", [][]byte{[]byte("1")}, nil, nil, nil).Close()
			// The block failed, as on any error: the INSERT is not run,
			// and COMMIT rolls back.
			if code := wantCodeOf(insert("in block")); code != "25P02" {
				t.Errorf("INSERT after the refused SHOW in a block: got SQLSTATE %q, want 25P02", code)
			}
			_, _ = pc.Exec(ctx, "COMMIT").ReadAll()
			return err
		}},
		{"with a parameter", "FG006", func() error {
			_, err := pc.ExecParams(ctx, "SET fencegate.token = 1", [][]byte{[]byte("1")}, nil, nil, nil).Close()
			return err
		}},
		{"not a token", "FG004", func() error { return setToken("'x'") }},
	} {
		before := e.values(t, "extset")
		if code := wantCodeOf(tc.run()); code != tc.code {
			t.Fatalf("%s: got SQLSTATE %q, want %s", tc.name, code, tc.code)
		}
		if got := e.values(t, "extset"); len(got) != len(before) {
			t.Fatalf("%s: got rows %q, want %q", tc.name, got, before)
		}
		if got := show("fencegate.token"); got != fmt.Sprint(cur) {
			t.Fatalf("%s: the token is %s, want %d", tc.name, got, cur)
		}
	}
	if err := insert("after"); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
}

// TestDatabaseGoneAtStart: a database that stops answering a connection's
// start, or closes it, gives the client a FATAL that says so (08006,
// BACKEND_UNAVAILABLE) within the startup timeout, not a connection that
// just ends. The databases here are faults, not PostgreSQL: a listener
// that takes the connection and never answers (a hung server), and one
// that closes it on the startup message.
func TestDatabaseGoneAtStart(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, c := range []struct {
		name  string
		serve func(net.Conn)
		want  string
	}{
		{
			"hung", func(c net.Conn) { _, _ = io.Copy(io.Discard, c) },
			"fencegate: BACKEND_UNAVAILABLE: the database did not answer the connection's start within 500ms",
		},
		{
			"closes", func(c net.Conn) { _, _ = c.Read(make([]byte, 1024)); c.Close() },
			"fencegate: BACKEND_UNAVAILABLE: the database closed the connection during its start",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lis.Close() })
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					conn, err := lis.Accept()
					if err != nil {
						return
					}
					wg.Add(1)
					go func() { defer wg.Done(); defer conn.Close(); c.serve(conn) }()
				}
			}()
			e := newEnv(t, pgwire.Config{StartupTimeout: timeout, PostgresDSN: "postgres://worker@" + lis.Addr().String() + "/postgres?sslmode=disable"})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			conn, err := pgx.Connect(ctx, e.dsn("worker", "gone", 1))
			if err == nil {
				conn.Close(ctx)
				t.Fatal("connected through fencegate to a database that is gone")
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "08006" || pe.Severity != "FATAL" || pe.Message != c.want {
				t.Fatalf("got %v, want FATAL 08006 %q", err, c.want)
			}
			if took := time.Since(start); took > timeout+3*time.Second {
				t.Fatalf("refused after %v, want within the %v startup timeout", took, timeout)
			}
		})
	}
}
