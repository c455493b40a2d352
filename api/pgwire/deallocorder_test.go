package pgwire_test

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/pgwire"
)

// TestDeallocateThenParseInOneSegment: an Execute of SQL DEALLOCATE and a
// Parse of the same name after it, before the Sync, leave the name holding
// what the Parse made (COMMIT here), as the server does: fencegate applies
// the two in message order, and SQL EXECUTE of the name is then refused as
// that of a transaction end. Applied the other way round, fencegate would
// forget the COMMIT, take the name for a query SQL PREPARE made, and let
// EXECUTE end the fenced transaction.
func TestDeallocateThenParseInOneSegment(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "deallocorder")
	conn := e.hijack(t, "deallocorder", tok)
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(conn)

	b := rt26ExtMsg(nil, 'P', rt26CStr("dorder"), rt26CStr("SELECT 1"), []byte{0, 0})
	b = rt26ExtMsg(b, 'S')
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if got, msg := rt25xTypes(rt25xUntilZ(t, r)); got != "1Z" {
		t.Fatalf("Parse: got %q (%s), want ParseComplete, ReadyForQuery", got, msg)
	}

	b = rt26ExtMsg(nil, 'P', rt26CStr(""), rt26CStr("DEALLOCATE dorder"), []byte{0, 0})
	b = rt26ExtMsg(b, 'B', rt26CStr(""), rt26CStr(""), []byte{0, 0, 0, 0, 0, 0})
	b = rt26ExtMsg(b, 'E', rt26CStr(""), []byte{0, 0, 0, 0})
	b = rt26ExtMsg(b, 'P', rt26CStr("dorder"), rt26CStr("COMMIT"), []byte{0, 0})
	b = rt26ExtMsg(b, 'S')
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if got, msg := rt25xTypes(rt25xUntilZ(t, r)); got != "12C1Z" {
		t.Fatalf("DEALLOCATE by Execute, then Parse of COMMIT under the name: got %q (%s)", got, msg)
	}

	got, msg := rt25xTypes(rt25xQuery(t, conn, r, "EXECUTE dorder"))
	if got != "EZ" || !strings.Contains(msg, "fencegate") {
		t.Fatalf("SQL EXECUTE of the name, which holds COMMIT: got %q (%s), want fencegate's refusal", got, msg)
	}
}

// TestQueryDeallocateThenParse: SQL DEALLOCATE in a simple Query, then a
// Parse of the same name as COMMIT in the next segment: the name holds
// the COMMIT, and SQL EXECUTE of it is refused. The Query's change is
// applied before the Parse's, as the server ran them.
func TestQueryDeallocateThenParse(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	tok, _ := e.lead(t, "querydealloc")
	conn := e.hijack(t, "querydealloc", tok)
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	r := bufio.NewReader(conn)

	b := rt26ExtMsg(nil, 'P', rt26CStr("qorder"), rt26CStr("SELECT 1"), []byte{0, 0})
	b = rt26ExtMsg(b, 'S')
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if got, msg := rt25xTypes(rt25xUntilZ(t, r)); got != "1Z" {
		t.Fatalf("Parse: got %q (%s)", got, msg)
	}
	if got, msg := rt25xTypes(rt25xQuery(t, conn, r, "DEALLOCATE qorder")); got != "CZ" {
		t.Fatalf("DEALLOCATE: got %q (%s)", got, msg)
	}
	b = rt26ExtMsg(nil, 'P', rt26CStr("qorder"), rt26CStr("COMMIT"), []byte{0, 0})
	b = rt26ExtMsg(b, 'S')
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if got, msg := rt25xTypes(rt25xUntilZ(t, r)); got != "1Z" {
		t.Fatalf("Parse of COMMIT: got %q (%s)", got, msg)
	}
	got, msg := rt25xTypes(rt25xQuery(t, conn, r, "EXECUTE qorder"))
	if got != "EZ" || !strings.Contains(msg, "fencegate") {
		t.Fatalf("SQL EXECUTE of the name, which holds COMMIT: got %q (%s), want fencegate's refusal", got, msg)
	}
}
