package pgwire_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// rt3Receive reads messages from fe until one of type T arrives, failing
// on an ErrorResponse or the end of the connection.
func rt3Receive[T pgproto3.BackendMessage](t *testing.T, what string, fe *pgproto3.Frontend) T {
	t.Helper()
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("%s: connection ended: %v", what, err)
		}
		if er, ok := m.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("%s: got %s %s %q", what, er.Severity, er.Code, er.Message)
		}
		if v, ok := m.(T); ok {
			return v
		}
	}
}

// TestRedTeam3ShutdownEndsOpenExtendedTransaction: a session whose
// transaction is open in the extended protocol, its statements answered
// but no Sync sent yet (libpq's pipeline mode with PQsendFlushRequest,
// any driver that pipelines BEGIN; INSERT ... before its Sync), has a
// transaction open: Shutdown must let it finish, as it does a transaction
// opened by a simple Query. CloseIfIdle judges "no transaction open" by
// the status of the last ReadyForQuery ('I', from before BEGIN), so the
// session is cut at once: the client is told FATAL 57P01 with its
// transaction open, and the INSERT it was told succeeded is rolled back
// instead of being let commit.
func TestRedTeam3ShutdownEndsOpenExtendedTransaction(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "rt3ext")
	tok, _ := e.lead(t, "rt3ext")
	c := e.connect(t, "rt3ext", tok)
	h, err := c.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Conn.Close()
	fe := h.Frontend
	fe.Send(&pgproto3.Parse{Query: "BEGIN"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Parse{Query: "INSERT INTO rt3ext (v) VALUES ('in the open transaction')"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Flush{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = h.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if cc := rt3Receive[*pgproto3.CommandComplete](t, "BEGIN", fe); string(cc.CommandTag) != "BEGIN" {
		t.Fatalf("got %q, want BEGIN", cc.CommandTag)
	}
	if cc := rt3Receive[*pgproto3.CommandComplete](t, "INSERT", fe); string(cc.CommandTag) != "INSERT 0 1" {
		t.Fatalf("got %q, want INSERT 0 1", cc.CommandTag)
	}

	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(sctx)
	}()
	// The transaction is open: nothing should come until the client ends it.
	_ = h.Conn.SetReadDeadline(time.Now().Add(time.Second))
	if m, err := fe.Receive(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("with its transaction open (BEGIN and INSERT answered, no Sync yet), the session got %#v (err %v) once Shutdown began; want nothing until the transaction ends", m, err)
	}
	// The client commits.
	_ = h.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	fe.Send(&pgproto3.Parse{Query: "COMMIT"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Sync{})
	_ = fe.Flush()
	var msgs []string
	for {
		m, err := fe.Receive()
		if err != nil {
			break
		}
		msgs = append(msgs, fmt.Sprintf("%T %+v", m, m))
	}
	if n := e.count(t, "rt3ext"); n != 1 {
		t.Errorf("rows after the client's COMMIT: %d, want 1 (the transaction was rolled back under the client); the client read after its COMMIT: %v", n, msgs)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestRedTeam3ShutdownPausedClientsHoldShutdown: Shutdown tells each idle
// session's client FATAL 57P01, waiting up to a second for a client that
// does not read, one session after another, under the connection group's
// lock (listen.Group.Shutdown calls CloseIfIdle for each while holding
// mu). A few idle sessions whose clients are paused with their socket
// full (here: LISTEN, then notifications they do not read) make Shutdown
// run past its context by a second each, and the group's lock held that
// long stops the sweep (Each) that ends transactions whose term ended.
func TestRedTeam3ShutdownPausedClientsHoldShutdown(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt3paused")
	const paused = 6
	for range paused {
		c := e.connect(t, "rt3paused", tok)
		if _, err := c.Exec(ctx, "LISTEN rt3paused"); err != nil {
			t.Fatal(err)
		}
		h, err := c.PgConn().Hijack()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Conn.Close() }) // never read before: a paused client
	}
	// Distinct payloads (one transaction's duplicates are folded), about
	// 16 MB for each listener: more than the sockets between fencegate and
	// each client hold.
	if _, err := e.admin.Exec(ctx, "SELECT pg_catalog.pg_notify('rt3paused', g::text || repeat('x', 7900)) FROM generate_series(1, 2000) g"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the notifications reach fencegate, which blocks writing them
	const limit = 2 * time.Second
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	start := time.Now()
	err := e.srv.Shutdown(sctx)
	d := time.Since(start)
	t.Logf("Shutdown with a %v context and %d paused idle clients: %v after %v", limit, paused, err, d)
	if d > limit+time.Second {
		t.Errorf("Shutdown returned %v after it began, its context ended after %v: each paused client held it for up to a second, one after another", d, limit)
	}
}

// TestRedTeam3LoginDuringShutdown: a connection accepted before Shutdown
// whose login completes after it (a slow client, or a slow database or
// bind) is logged in and told ReadyForQuery, then its connection is
// closed with no message (handle: Track fails, sess.close with no
// shutdown reason): the bare end of stream f8b6e12 replaced with
// FATAL 57P01 for every other session Shutdown ends. PostgreSQL refuses
// a login during shutdown with FATAL 57P03 and never lets it reach
// ReadyForQuery.
func TestRedTeam3LoginDuringShutdown(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "rt3late")
	raw, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	time.Sleep(200 * time.Millisecond) // accepted, and waiting for its startup message
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(sctx)
	}()
	time.Sleep(300 * time.Millisecond) // Shutdown has begun
	fe := pgproto3.NewFrontend(raw, raw)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{
		"user": "worker", "database": "postgres", "options": fmt.Sprintf("-c fencegate.fence=rt3late -c fencegate.token=%d", tok),
	}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	var msgs []string
	var last pgproto3.BackendMessage
	ready := false
	for {
		m, err := fe.Receive()
		if err != nil {
			break
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			ready = true
		}
		last = m
		msgs = append(msgs, fmt.Sprintf("%T", m))
	}
	er, ok := last.(*pgproto3.ErrorResponse)
	if !ok || er.Severity != "FATAL" || (er.Code != "57P01" && er.Code != "57P03") {
		t.Errorf("a login completed during Shutdown (ReadyForQuery seen: %v) read %v and then the end of the connection; want a FATAL 57P03 (or 57P01) as its last message", ready, msgs)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
