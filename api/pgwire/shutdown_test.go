package pgwire_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestShutdownTellsClients: a session Shutdown ends, idle at once or once
// its transaction is over, gets PostgreSQL's FATAL 57P01
// (admin_shutdown) before its connection closes, as from a database that
// shuts down, not a bare end of stream.
func TestShutdownTellsClients(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "sdt")
	tok, _ := e.lead(t, "sdt")
	idle := e.connect(t, "sdt", tok)
	busy := e.connect(t, "sdt", tok)
	if _, err := busy.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := busy.Exec(ctx, "INSERT INTO sdt (v) VALUES ('1')"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(sctx)
	}()
	waitShutdownFatal(t, "idle session", idle)
	if _, err := busy.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT during Shutdown: %v", err)
	}
	waitShutdownFatal(t, "session after its COMMIT", busy)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// waitShutdownFatal reads c's connection until it ends, and wants a FATAL
// 57P01 as its last message.
func waitShutdownFatal(t *testing.T, what string, c *pgx.Conn) {
	t.Helper()
	h, err := c.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Conn.Close()
	_ = h.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var last pgproto3.BackendMessage
	for {
		m, err := h.Frontend.Receive()
		if err != nil {
			break
		}
		last = m
	}
	er, ok := last.(*pgproto3.ErrorResponse)
	if !ok || er.Severity != "FATAL" || er.Code != "57P01" {
		t.Fatalf("%s: last message before the end %#v, want FATAL 57P01", what, last)
	}
}

// TestShutdownBetweenCommitAndAnswer: Shutdown that comes after a
// transaction committed and S2C took its ReadyForQuery off the queue,
// but before S2C wrote it to the client, must let the answer through
// before the 57P01: the session looks idle there (nothing queued, status
// 'I', no transaction open), and closed then, its client reads FATAL
// 57P01 for a write that is stored: a refusal that lies (as
// cmd/fencegate.TestRedTeam2SigtermUnderLoad once caught under load).
// The hook holds S2C in that window while Shutdown runs.
func TestShutdownBetweenCommitAndAnswer(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, pgwire.Config{})
	e.table(t, "sdwin")
	tok, _ := e.lead(t, "sdwin")
	c := e.connect(t, "sdwin", tok)

	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	e.srv.SetTestHookAnswering(func() {
		if armed.CompareAndSwap(true, false) {
			close(held)
			<-release
		}
	})
	armed.Store(true)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "INSERT INTO sdwin (v) VALUES ('committed')")
		wrote <- err
	}()
	select {
	case <-held:
	case err := <-wrote:
		t.Fatalf("the INSERT was answered without passing the hook: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the INSERT's ReadyForQuery never reached the hook")
	}
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(sctx)
	}()
	// Shutdown has looked at the session (Group.Shutdown calls
	// CloseIfIdle before it waits), and a close it started has had time
	// to tell the client.
	time.Sleep(500 * time.Millisecond)
	close(release)

	err := <-wrote
	n := e.count(t, "sdwin")
	if err != nil || n != 1 {
		t.Errorf("the client was told %v, and the table holds %d rows: want the INSERT answered and stored", err, n)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	waitShutdownFatal(t, "session after its answer", c)
}
