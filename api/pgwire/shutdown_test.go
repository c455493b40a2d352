package pgwire_test

import (
	"context"
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
