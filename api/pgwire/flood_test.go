package pgwire_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// hijack connects through the listener and takes the raw connection, past
// startup, for a client that speaks the protocol by hand.
func (e *env) hijack(t *testing.T, fence string, token uint64) net.Conn {
	t.Helper()
	c := e.connect(t, fence, token)
	hc, err := c.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	return hc.Conn
}

// readMessages reads n messages and returns their types.
func readMessages(t *testing.T, r *bufio.Reader, n int) []byte {
	t.Helper()
	types := make([]byte, 0, n)
	var hdr [5]byte
	for len(types) < n {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			t.Fatalf("after %d messages: %v", len(types), err)
		}
		if _, err := r.Discard(int(binary.BigEndian.Uint32(hdr[1:])) - 4); err != nil {
			t.Fatal(err)
		}
		types = append(types, hdr[0])
	}
	return types
}

// TestFloodOfSyncsBounded: a client that sends many small messages and
// reads no answer makes fencegate wait, as the database would, instead of
// queueing a reply entry per message; every answer still comes, in order.
func TestFloodOfSyncsBounded(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "flood")
	conn := e.hijack(t, "flood", tok)
	const syncs = 1 << 19 // 2.5 MiB
	wrote := make(chan error, 1)
	go func() {
		chunk := bytes.Repeat([]byte{'S', 0, 0, 0, 4}, syncs/16)
		for range 16 {
			if _, err := conn.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	time.Sleep(time.Second) // the answers pile up unread
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	types := readMessages(t, bufio.NewReaderSize(conn, 1<<16), syncs)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	for i, ty := range types {
		if ty != 'Z' {
			t.Fatalf("answer %d is %q, want ReadyForQuery for every Sync", i, ty)
		}
	}
	conn.Close()
	for deadline := time.Now().Add(10 * time.Second); e.srv.PeakQueued() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the session did not end")
		}
	}
	// A Sync's entry leaves the queue when its ReadyForQuery is read;
	// without the bound the queue held 106009 to 119294 of them here.
	if got, bound := e.srv.PeakQueued(), int64(pgwire.MaxOutstanding); got > bound {
		t.Fatalf("the queue held %d requests, want at most %d", got, bound)
	}
}

// TestManyParsesWithoutSync: a segment may make or close at most 2^18
// statements and portals before its Sync; past that the segment is refused
// with FG006 and the connection goes on.
func TestManyParsesWithoutSync(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "parses")
	conn := e.hijack(t, "parses", tok)
	const n = 1<<18 + 1
	parse := []byte{'P', 0, 0, 0, 16, 0}
	parse = append(append(parse, "SELECT 1"...), 0, 0, 0)
	go func() {
		w := bufio.NewWriterSize(conn, 1<<16)
		for range n {
			_, _ = w.Write(parse)
		}
		_, _ = w.Write([]byte{'S', 0, 0, 0, 4, 'Q', 0, 0, 0, 13, 'S', 'E', 'L', 'E', 'C', 'T', ' ', '1', 0})
		_ = w.Flush()
	}()
	_ = conn.SetDeadline(time.Now().Add(90 * time.Second))
	r := bufio.NewReaderSize(conn, 1<<16)
	types := readMessages(t, r, n-1+2)
	for i, ty := range types[:n-1] {
		if ty != '1' {
			t.Fatalf("answer %d is %q, want ParseComplete", i, ty)
		}
	}
	if got := string(types[n-1:]); got != "EZ" {
		t.Fatalf("after %d ParseCompletes got %q, want the refusal and ReadyForQuery", n-1, got)
	}
	// The next query runs: the connection is fine.
	if got := string(readMessages(t, r, 4)); got != "TDCZ" {
		t.Fatalf("the query after the refused segment got %q, want a row and ReadyForQuery", got)
	}
}

// TestLocalSegmentBounded: a SET fencegate.token that fencegate answers
// itself (localSegment), followed by many Describes and no Sync, gets its
// answers as they come, as from the database, instead of fencegate
// holding them all until the Sync; then the Sync ends the segment and the
// session goes on.
func TestLocalSegmentBounded(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "localflood")
	conn := e.hijack(t, "localflood", tok)
	const describes = 200_000 // 1.4 MB in, 2.4 MB of answers
	var b []byte
	b = append(b, 'P', 0, 0, 0, 0)
	b = append(b, 0)
	b = append(b, "SET fencegate.token = 1"...)
	b = append(b, 0, 0, 0)
	binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
	b = append(b, bytes.Repeat([]byte{'D', 0, 0, 0, 6, 'S', 0}, describes)...)
	wrote := make(chan error, 1)
	go func() { _, err := conn.Write(b); wrote <- err }()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReaderSize(conn, 1<<16)
	// With no Sync sent, all but the last few KiB of the answers come:
	// ParseComplete, then ParameterDescription and NoData per Describe.
	const early = 2*describes - 4000
	types := readMessages(t, r, early)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte{'S', 0, 0, 0, 4}); err != nil {
		t.Fatal(err)
	}
	types = append(types, readMessages(t, r, 1+2*describes-early+1)...)
	if types[0] != '1' || types[1] != 't' || types[2] != 'n' || types[len(types)-2] != 'n' || types[len(types)-1] != 'Z' {
		t.Fatalf("got answers %q...%q, want ParseComplete, ParameterDescription and NoData per Describe, then ReadyForQuery", types[:3], types[len(types)-2:])
	}
	// Nothing was executed: the token stays, and the session answers.
	if got, want := showToken(t, conn, r), strconv.FormatUint(tok, 10); got != want {
		t.Fatalf("SHOW fencegate.token: got %q, want %q", got, want)
	}
}

// showToken sends SHOW fencegate.token as a simple Query on a hijacked
// connection and returns its value, read up to ReadyForQuery.
func showToken(t *testing.T, conn net.Conn, r *bufio.Reader) string {
	t.Helper()
	show := []byte("Q\x00\x00\x00\x00SHOW fencegate.token\x00")
	binary.BigEndian.PutUint32(show[1:], uint32(len(show)-1))
	if _, err := conn.Write(show); err != nil {
		t.Fatal(err)
	}
	var hdr [5]byte
	var value string
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		switch hdr[0] {
		case 'D':
			value = string(body[6:]) // one column: its length, then the value
		case 'Z':
			return value
		}
	}
}

// TestQueryInsideLocalSegment: a Query sent before the Sync of a SET
// fencegate answers itself gets its answers after the SET's, in order;
// the SET, never synced, leaves the token as it was, and the Query runs
// fenced as any other.
func TestQueryInsideLocalSegment(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "localq")
	tok, _ := e.lead(t, "localq")
	conn := e.hijack(t, "localq", tok)
	msg := func(typ byte, body string) []byte {
		b := append([]byte{typ, 0, 0, 0, 0}, body...)
		binary.BigEndian.PutUint32(b[1:], uint32(len(b)-1))
		return b
	}
	var b []byte
	b = append(b, msg('P', "\x00SET fencegate.token = 1\x00\x00\x00")...)
	b = append(b, msg('B', "\x00\x00\x00\x00\x00\x00\x00\x00")...)
	b = append(b, msg('E', "\x00\x00\x00\x00\x00")...)
	b = append(b, msg('Q', "INSERT INTO localq (v) VALUES ('q:' || "+fencedMark+") RETURNING v\x00")...)
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	// ParseComplete, BindComplete, CommandComplete (SET); then the
	// Query's RowDescription, DataRow, CommandComplete, ReadyForQuery.
	if got, want := string(readMessages(t, r, 7)), "12CTDCZ"; got != want {
		t.Fatalf("got answers %q, want %q", got, want)
	}
	if got := e.values(t, "localq"); len(got) != 1 || got[0] != "q:localq" {
		t.Fatalf("got rows %q, want the Query's, written after the fence check (q:localq)", got)
	}
	if got, want := showToken(t, conn, r), strconv.FormatUint(tok, 10); got != want {
		t.Fatalf("SHOW fencegate.token: got %q, want %q (the unsynced SET changed it)", got, want)
	}
}
