package pgwire

import (
	"encoding/binary"
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
