package postgres

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkExecCoalesced measures 16 concurrent writers, each on its own
// fence, through Backends whose pools allow 16, 8, 4 and 2 writes in flight:
// the fewer slots, the more writes share a round trip. Reported besides
// ns/op: writes per round trip and the PostgreSQL server's CPU per write
// (all its processes, from /proc), which is what coalescing saves.
//
//	go test -run XXX -bench ExecCoalesced -benchtime 5s -count 3 ./proxy/postgres/
func BenchmarkExecCoalesced(b *testing.B) {
	db := admin(b)
	table := unique("bench")
	mustExec(b, db, "CREATE TABLE "+table+"(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, worker text NOT NULL, token bigint NOT NULL)")
	insert := "INSERT INTO " + table + "(worker, token) VALUES ($1, $2)"
	const writers = 16
	for _, conns := range []int32{16, 8, 4, 2} {
		b.Run(fmt.Sprintf("writers=%d/conns=%d", writers, conns), func(b *testing.B) {
			be, err := Open(b.Context(), runtimeDSN, Config{MaxConns: conns})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			var next atomic.Int64
			// RunParallel starts GOMAXPROCS × parallelism goroutines.
			b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
			cpu0, s0 := serverCPU(b), be.Stats()
			b.RunParallel(func(pb *testing.PB) {
				fence := unique("bench")
				worker := strconv.FormatInt(next.Add(1), 10)
				stmts := []Statement{{SQL: insert, Params: []any{worker, float64(7)}}}
				for pb.Next() {
					if _, err := be.Exec(b.Context(), fence, 7, stmts); err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu1, s1 := serverCPU(b), be.Stats()
			if trips := s1.Batches - s0.Batches; trips > 0 {
				b.ReportMetric(float64(s1.Calls-s0.Calls)/float64(trips), "writes/trip")
			}
			var used float64
			for pid, t := range cpu1 {
				used += t - cpu0[pid] // 0 for a backend started meanwhile
			}
			b.ReportMetric(used*1e6/float64(b.N), "pg-cpu-µs/op")
		})
	}
}

// serverCPU returns the CPU seconds (user + system) of each of the
// throwaway server's processes: the postmaster and its children. Reaped
// children are left out: their CPU would land in whatever run reaps them.
func serverCPU(tb testing.TB) map[int]float64 {
	tb.Helper()
	pm := server.PID()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	cpu := make(map[int]float64)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, t, ok := procStat(pid); ok && (pid == pm || ppid == pm) {
			cpu[pid] = t
		}
	}
	return cpu
}

// procStat returns a process's parent and its own CPU seconds.
func procStat(pid int) (ppid int, cpu float64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ppid, _ = strconv.Atoi(f[1])
	var ticks float64
	for _, i := range []int{11, 12} { // utime, stime
		v, _ := strconv.ParseFloat(f[i], 64)
		ticks += v
	}
	return ppid, ticks / 100, true
}

// BenchmarkExecAs measures the cost of running a write's statements as a
// role (ExecAs) against the same write as fencegate's login, 16 writers on
// their own fences, with a connection each and with 4 shared.
//
//	go test -run XXX -bench ExecAs -benchtime 5s -count 3 ./proxy/postgres/
func BenchmarkExecAs(b *testing.B) {
	w := newWriters(b)
	insert := "INSERT INTO " + w.at + " VALUES ($1)"
	const writers = 16
	for _, conns := range []int32{16, 4} {
		for _, role := range []string{"", w.aw} {
			name := "login"
			if role != "" {
				name = "role"
			}
			b.Run(fmt.Sprintf("conns=%d/%s", conns, name), func(b *testing.B) {
				be, err := Open(b.Context(), w.dsn, Config{MaxConns: conns})
				if err != nil {
					b.Fatal(err)
				}
				defer be.Close()
				b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
				cpu0 := serverCPU(b)
				b.RunParallel(func(pb *testing.PB) {
					fence := unique("bench")
					stmts := []Statement{{SQL: insert, Params: []any{float64(7)}}}
					for pb.Next() {
						if _, err := be.ExecAs(b.Context(), fence, 7, role, stmts); err != nil {
							b.Error(err)
							return
						}
					}
				})
				cpu1 := serverCPU(b)
				var used float64
				for pid, t := range cpu1 {
					used += t - cpu0[pid]
				}
				b.ReportMetric(used*1e6/float64(b.N), "pg-cpu-µs/op")
			})
		}
	}
}

// BenchmarkExecTerm measures a postgres-term fence's write: the check is
// fencegate.advance_term, which reads the fence's row of the term table
// and, from migration 011, looks through the table for another election
// with the same lock key. One writer, the current leader's token, term
// tables of 10, 1,000 and 10,000 rows, and of 10,000 with the index
// docs/SAFETY.md suggests on the lock key.
//
//	go test -run XXX -bench ExecTerm -benchtime 3s -count 3 ./proxy/postgres/
func BenchmarkExecTerm(b *testing.B) {
	db := admin(b)
	out := unique("bench_term_writes")
	mustExec(b, db, "CREATE TABLE "+out+"(v bigint)")
	mustExec(b, db, "GRANT INSERT ON "+out+" TO fencegate_test")
	stmts := []Statement{{SQL: "INSERT INTO " + out + " VALUES ($1)", Params: []any{float64(7)}}}
	for _, bc := range []struct {
		rows  int
		index bool
	}{{10, false}, {1000, false}, {10000, false}, {10000, true}} {
		rows := bc.rows
		name := fmt.Sprintf("rows=%d", rows)
		if bc.index {
			name += "/index"
		}
		b.Run(name, func(b *testing.B) {
			table := unique("bench_term")
			fence := unique("bench_leader")
			mustExec(b, db, "CREATE TABLE "+table+"(name text PRIMARY KEY, term bigint NOT NULL)")
			mustExec(b, db, "GRANT SELECT, UPDATE (term) ON "+table+" TO fencegate_owner")
			mustExec(b, db, "INSERT INTO "+table+" SELECT 'filler_' || i, 1 FROM generate_series(2, $1) AS i", rows)
			mustExec(b, db, "INSERT INTO "+table+" VALUES ($1, 1)", fence)
			if bc.index {
				mustExec(b, db, "CREATE INDEX ON "+table+" ((hashtext(name)))")
			}
			mustExec(b, db, "ANALYZE "+table)
			// The leader: this session holds the election's lock.
			leader := admin(b)
			mustExec(b, leader, "SELECT pg_advisory_lock(hashtext($1))", fence)
			tc, err := NewTermCheck("public."+table, LockKeyHashtext)
			if err != nil {
				b.Fatal(err)
			}
			be, err := Open(b.Context(), runtimeDSN, Config{MaxConns: 1, TermCheck: func(string) (TermCheck, bool) { return tc, true }})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			cpu0 := serverCPU(b)
			for b.Loop() {
				if _, err := be.Exec(b.Context(), fence, 1, stmts); err != nil {
					b.Fatal(err)
				}
			}
			cpu1 := serverCPU(b)
			var used float64
			for pid, t := range cpu1 {
				used += t - cpu0[pid]
			}
			b.ReportMetric(used*1e6/float64(b.N), "pg-cpu-µs/op")
		})
	}
}
