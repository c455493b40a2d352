package pgwire

import (
	"encoding/binary"
	"strconv"
	"testing"
)

// TestCountRows: the audit's rows are those the client's statements
// changed, as their tags say: INSERT, UPDATE, DELETE, MERGE and COPY FROM,
// not COPY TO, MOVE, FETCH or SELECT; rows a ROLLBACK TO SAVEPOINT undid
// are taken off, by the savepoint's name.
func TestCountRows(t *testing.T) {
	for _, tc := range []struct {
		sql  string   // one simple Query
		tags []string // its answers, in order
		want int64
	}{
		{"INSERT INTO t VALUES (1)", []string{"INSERT 0 1"}, 1},
		{"UPDATE t SET v = 1; DELETE FROM t; MERGE INTO t USING u ON true WHEN MATCHED THEN DELETE", []string{"UPDATE 3", "DELETE 4", "MERGE 5"}, 12},
		{"COPY t FROM STDIN", []string{"COPY 6"}, 6},
		{"COPY t FROM '/tmp/f'", []string{"COPY 6"}, 6},
		{"COPY t TO STDOUT", []string{"COPY 6"}, 0},
		{"COPY t TO STDOUT; COPY t FROM STDIN", []string{"COPY 6", "COPY 2"}, 2},
		{"MOVE 7 IN c; FETCH 3 IN c; SELECT 1", []string{"MOVE 7", "FETCH 3", "SELECT 1"}, 0},
		{"CREATE TABLE x (); DROP TABLE x", []string{"CREATE TABLE", "DROP TABLE"}, 0},
		{
			"INSERT INTO t VALUES (1); SAVEPOINT a; INSERT INTO t VALUES (1); ROLLBACK TO SAVEPOINT a; INSERT INTO t VALUES (1)",
			[]string{"INSERT 0 2", "SAVEPOINT", "INSERT 0 5", "ROLLBACK", "INSERT 0 1"},
			3,
		},
		{
			"SAVEPOINT a; INSERT INTO t VALUES (1); SAVEPOINT b; INSERT INTO t VALUES (1); ROLLBACK TO a; INSERT INTO t VALUES (1)",
			[]string{"SAVEPOINT", "INSERT 0 1", "SAVEPOINT", "INSERT 0 2", "ROLLBACK", "INSERT 0 4"},
			4,
		},
		{
			"SAVEPOINT a; INSERT INTO t VALUES (1); RELEASE a; INSERT INTO t VALUES (1)",
			[]string{"SAVEPOINT", "INSERT 0 1", "RELEASE", "INSERT 0 2"},
			3,
		},
		// Released with the one after it: ROLLBACK TO b finds none.
		{
			"SAVEPOINT a; SAVEPOINT b; INSERT INTO t VALUES (1); RELEASE a; ROLLBACK TO b",
			[]string{"SAVEPOINT", "SAVEPOINT", "INSERT 0 1", "RELEASE", "ROLLBACK"},
			1,
		},
		// The latest of a name; a quoted name is its own.
		{
			`SAVEPOINT a; INSERT INTO t VALUES (1); SAVEPOINT A; INSERT INTO t VALUES (1); SAVEPOINT "A"; INSERT INTO t VALUES (1); ROLLBACK TO a`,
			[]string{"SAVEPOINT", "INSERT 0 1", "SAVEPOINT", "INSERT 0 2", "SAVEPOINT", "INSERT 0 4", "ROLLBACK"},
			1,
		},
		// A ROLLBACK that ends the transaction is no ROLLBACK TO.
		{"SAVEPOINT a; INSERT INTO t VALUES (1); ROLLBACK", []string{"SAVEPOINT", "INSERT 0 1", "ROLLBACK"}, 1},
	} {
		c := &session{}
		g := &reply{msg: 'Q', vd: classify(tc.sql)}
		if g.vd.refuse != "" {
			t.Fatalf("%s: %s", tc.sql, g.vd.refuse)
		}
		for _, tag := range tc.tags {
			c.countRows(g, commandComplete(tag))
		}
		if c.rows != tc.want {
			t.Errorf("%s: got %d rows, want %d", tc.sql, c.rows, tc.want)
		}
	}
}

// TestCountRowsAllocs: counting a transaction of one INSERT, the common
// path, allocates nothing; nor does a savepoint once its stack has room.
func TestCountRowsAllocs(t *testing.T) {
	ins, sp, rb := commandComplete("INSERT 0 1"), commandComplete("SAVEPOINT"), commandComplete("ROLLBACK")
	c := &session{}
	one := &reply{msg: 'E', vd: classify("INSERT INTO t VALUES ($1)")}
	if n := testing.AllocsPerRun(100, func() { c.countRows(one, ins) }); n != 0 {
		t.Errorf("an INSERT's tag: %v allocations, want 0", n)
	}
	q := &reply{msg: 'Q', vd: classify("SAVEPOINT a; INSERT INTO t VALUES (1); ROLLBACK TO a")}
	run := func() {
		q.op = 0
		clear(c.saves)
		c.saves = c.saves[:0]
		c.countRows(q, sp)
		c.countRows(q, ins)
		c.countRows(q, rb)
	}
	run()
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("a savepoint rolled back to: %v allocations, want 0", n)
	}
}

// commandComplete is the body of a CommandComplete with tag.
func commandComplete(tag string) []byte {
	b := appendCommandComplete(nil, tag)
	if len(b) < 5 || binary.BigEndian.Uint32(b[1:]) != uint32(len(b)-1) {
		panic("not a CommandComplete")
	}
	return b[5:]
}

// TestCountRowsSavepointsBounded: a transaction that sets savepoints
// without end (each one a SAVEPOINT statement of its own, as a driver
// sends them) holds the latest maxSaves of them and no more, and a
// ROLLBACK TO or RELEASE of one let go still counts no more rows than
// were written.
func TestCountRowsSavepointsBounded(t *testing.T) {
	const n = 100_000
	ins, sp, rb, rel := commandComplete("INSERT 0 1"), commandComplete("SAVEPOINT"), commandComplete("ROLLBACK"), commandComplete("RELEASE")
	c := &session{}
	one := func(op rowsOp, tag []byte) {
		c.countRows(&reply{msg: 'E', vd: &verdict{rows: []rowsOp{op}}}, tag)
	}
	name := func(i int) string { return "s" + strconv.Itoa(i) }
	for i := range n {
		one(rowsOp{kind: opSavepoint, name: name(i)}, sp)
		c.countRows(&reply{msg: 'E', vd: &verdict{}}, ins)
	}
	if c.rows != n {
		t.Fatalf("got %d rows, want %d", c.rows, n)
	}
	if len(c.saves) > maxSaves || cap(c.saves) > 2*maxSaves {
		t.Fatalf("after %d savepoints %d are held (room for %d), want at most %d", n, len(c.saves), cap(c.saves), maxSaves)
	}

	// One kept: exact.
	one(rowsOp{kind: opRollbackTo, name: name(n - 10)}, rb)
	if c.rows != n-10 {
		t.Fatalf("ROLLBACK TO a kept savepoint: %d rows, want %d", c.rows, n-10)
	}
	// One let go: 5 rows stay written since it, and the count may be
	// short of them but never over.
	one(rowsOp{kind: opRollbackTo, name: name(5)}, rb)
	if c.rows > 5 {
		t.Fatalf("ROLLBACK TO a savepoint let go: %d rows, want at most the 5 written before it", c.rows)
	}
	// RELEASE of one let go takes every kept one with it: ROLLBACK TO a
	// later one finds none and changes nothing.
	one(rowsOp{kind: opSavepoint, name: "late"}, sp)
	one(rowsOp{kind: opRelease, name: name(7)}, rel)
	if len(c.saves) != 0 {
		t.Fatalf("RELEASE of a savepoint let go left %d kept after it", len(c.saves))
	}
	c.resetSaves()
	if c.savesLost || len(c.saves) != 0 {
		t.Fatal("a new transaction starts with savepoints of the last")
	}
}
