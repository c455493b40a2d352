package pgwire_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/internal/goworkers"
	"github.com/fencegate/fencegate/api/pgwire"
)

// pgJDBC is Debian's PgJDBC (libpostgresql-jdbc-java, .ci/deps.sh).
const pgJDBC = "/usr/share/java/postgresql.jar"

// hikariCP is Debian's HikariCP (libhikaricp-java) with SLF4J's API and
// its no-op logger (libslf4j-java), and PgJDBC.
const hikariCP = "/usr/share/java/HikariCP.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar:" + pgJDBC

// A pgDriver runs one of the worker programs in testdata (and
// ../testdata/node) with <port> <fence> <token> <set-token|-> <table>
// <tag>: it prints "OK <rows it wrote>" or "ERR <SQLSTATE> <message>".
type pgDriver struct {
	name string
	argv []string // the program; the worker's arguments follow
	// goWorker, in place of argv, is a command of ../testdata/go, a
	// module of its own, which the test builds.
	goWorker string
	opts     []string // after the worker's arguments
	rows     int      // rows one run writes
	// setOpts replace opts for the run that connects with the zombie's
	// token and then SETs the leader's.
	setOpts []string
	// noSet says why the driver has no such run.
	noSet string
}

var pgDrivers = []pgDriver{
	// Debian's python3, where python3-psycopg2 and python3-psycopg install.
	{name: "psycopg2", argv: []string{"/usr/bin/python3", "testdata/psycopg2_worker.py"}, rows: 5},
	{name: "psycopg", argv: []string{"/usr/bin/python3", "testdata/psycopg_worker.py"}, rows: 14},
	{name: "asyncpg", argv: []string{"/usr/bin/python3", "testdata/asyncpg_worker.py"}, rows: 10},
	// PgJDBC runs SET extra_float_digits at connect unless
	// assumeMinServerVersion is 9.0 or later: a transaction like any other,
	// fenced, so with the zombie's token the connection fails before it
	// could SET the token. A worker that SETs its new token on pooled
	// connections opened them while its token was current.
	{
		name: "pgjdbc", argv: []string{"java", "-cp", pgJDBC, "testdata/PgJDBCWorker.java"}, rows: 10,
		setOpts: []string{"assumeMinServerVersion=9.4"},
	},
	// A savepoint before every statement of a transaction, in the same
	// round trip.
	{
		name: "pgjdbc autosave", argv: []string{"java", "-cp", pgJDBC, "testdata/PgJDBCWorker.java"}, rows: 10,
		opts: []string{"autosave=always"}, setOpts: []string{"autosave=always", "assumeMinServerVersion=9.4"},
	},
	// A HikariCP pool (Spring Boot's) of PgJDBC connections: it rolls
	// back a transaction left open as a connection comes back, resets
	// the isolation level, validates with isValid.
	{
		name: "hikaricp", argv: []string{"java", "-cp", hikariCP, "testdata/HikariWorker.java"}, rows: 6,
		opts:  []string{"assumeMinServerVersion=9.4"},
		noSet: "HikariCP reads the default isolation level (PgJDBC's SHOW TRANSACTION ISOLATION LEVEL) as its pool's first connection opens, before connectionInitSql",
	},
	{name: "node-postgres", argv: []string{"node", "../testdata/node/pg.mjs"}, rows: 7},
	// postgres.js reads the array types with its first query on a
	// connection, fenced like any other.
	{
		name: "postgres.js", argv: []string{"node", "../testdata/node/postgresjs.mjs"}, rows: 10,
		setOpts: []string{"fetch_types=false"},
	},
	// ORMs over psycopg2 (Debian's python3-sqlalchemy and python3-django).
	{name: "sqlalchemy", argv: []string{"/usr/bin/python3", "testdata/sqlalchemy_worker.py"}, rows: 7},
	// Django SETs TIME ZONE at connect, before its connection_created
	// signal, where the worker SETs its token.
	{
		name: "django", argv: []string{"/usr/bin/python3", "testdata/django_worker.py"}, rows: 5,
		setOpts: []string{"tz=none"},
	},
	// Rails' ORM over ruby-pg (Debian's ruby-activerecord and ruby-pg).
	{
		name: "activerecord", argv: []string{"ruby", "testdata/activerecord_worker.rb"}, rows: 5,
		noSet: "ActiveRecord SETs client_min_messages and standard_conforming_strings as a connection opens, before the worker can run anything",
	},
	// PHP's PDO over libpq (Debian's php-pgsql): named statements of
	// libpq's PQprepare, SET TRANSACTION after PDO's BEGIN, COPY.
	{name: "pdo_pgsql", argv: []string{"php", "../testdata/php/pdo_worker.php"}, rows: 6},
	// Perl's DBI over DBD::Pg and libpq (Debian's libdbd-pg-perl): its
	// own BEGIN with AutoCommit off, statements prepared on the server,
	// savepoints, COPY.
	{name: "dbd_pg", argv: []string{"perl", "testdata/dbdpg_worker.pl"}, rows: 5},
	// Go's database/sql: lib/pq prepares a statement with arguments in a
	// round trip of its own (Parse/Describe/Sync), then binds and runs it.
	{name: "lib/pq", goWorker: "pqworker", rows: 9},
	// GORM over pgx's database/sql driver: its own transaction around
	// each Create, nested transactions as savepoints.
	{name: "gorm", goWorker: "gormworker", rows: 7},
}

// goWorkerDir holds the Go workers once goWorkers built them.
var goWorkerDir string

// goWorkers builds the commands of ../testdata/go into goWorkerDir, once.
var goWorkers = sync.OnceValue(func() error { return goworkers.Build(goWorkerDir) })

// run runs the driver's worker and returns what it printed.
func (d pgDriver) run(t *testing.T, port, fence string, token uint64, setToken, table, tag string, opts []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	argv := d.argv
	if d.goWorker != "" {
		if err := goWorkers(); err != nil {
			t.Fatal(err)
		}
		argv = []string{filepath.Join(goWorkerDir, d.goWorker)}
	}
	args := slices.Concat(argv[1:], []string{port, fence, fmt.Sprint(token), setToken, table, tag}, opts)
	out, err := exec.CommandContext(ctx, argv[0], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", d.name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestDrivers: the PostgreSQL drivers workers use, unmodified, through
// the listener: psycopg2 (libpq: simple queries, its own BEGIN before a
// statement, COPY), psycopg 3 (extended protocol, prepared statements,
// pipeline mode, savepoints, COPY), asyncpg (named statements, a pool
// that runs RESET ALL at every release, savepoints, a serializable
// transaction, COPY), PgJDBC (extended protocol only: named statements,
// batches, savepoints; and with a savepoint before every statement),
// a HikariCP pool of PgJDBC connections (a transaction left open rolled
// back by the pool, isolation reset, isValid), node-postgres (unnamed and
// named statements, a transaction, a string of
// two statements), postgres.js (named statements pipelined on one
// connection, savepoints, COPY), and the ORMs SQLAlchemy (sessions and
// flushes, a pool with pre-ping), Django (atomic blocks, savepoints,
// select_for_update) and ActiveRecord (BEGIN then SET TRANSACTION,
// savepoints, FOR UPDATE, insert_all); PHP's PDO (server-side prepared
// statements, SET TRANSACTION, COPY, emulated prepares); Perl's DBD::Pg
// (its own BEGIN, server-side prepares, savepoints, COPY); and from Go, lib/pq through
// database/sql (statements prepared in a round trip of their own, COPY)
// and GORM (its transaction around every Create, nested transactions as
// savepoints, prepared statements). Each writes with the
// leader's token; with the zombie's it is refused and stores nothing; a
// connection opened with the zombie's token writes after SET
// fencegate.token to the leader's (unless the driver runs statements of
// its own first: noSet).
func TestDrivers(t *testing.T) {
	e := newEnv(t, pgwire.Config{})
	e.table(t, "drv")
	old, resign := e.lead(t, "drivers")
	resign()
	cur, _ := e.lead(t, "drivers")
	for _, jar := range strings.Split(hikariCP, ":") {
		if _, err := os.Stat(jar); err != nil {
			t.Fatalf("%v: run make deps (Debian's libpostgresql-jdbc-java, libhikaricp-java, libslf4j-java)", err)
		}
	}
	for _, pkg := range []string{"pg", "postgres"} {
		if _, err := os.Stat("../testdata/node/node_modules/" + pkg); err != nil {
			t.Fatalf("npm package %s: %v: run make deps (npm ci --prefix api/testdata/node)", pkg, err)
		}
	}
	for i, d := range pgDrivers {
		t.Run(d.name, func(t *testing.T) {
			tag := func(s string) string { return fmt.Sprintf("d%d%s", i, s) }
			if got, want := d.run(t, e.port, "drivers", cur, "-", "drv", tag("leader"), d.opts), fmt.Sprintf("OK %d", d.rows); got != want {
				t.Errorf("leader's token: got %q, want %q", got, want)
			}
			if got := d.run(t, e.port, "drivers", old, "-", "drv", tag("zombie"), d.opts); !strings.HasPrefix(got, "ERR FG001 ") || !strings.Contains(got, "fencegate: STALE_TOKEN: ") {
				t.Errorf("zombie's token: got %q, want ERR FG001 ... fencegate: STALE_TOKEN: ...", got)
			}
			setRows := 0
			if d.noSet == "" {
				opts := d.opts
				if d.setOpts != nil {
					opts = d.setOpts
				}
				if got, want := d.run(t, e.port, "drivers", old, fmt.Sprint(cur), "drv", tag("set"), opts), fmt.Sprintf("OK %d", d.rows); got != want {
					t.Errorf("zombie's token, then SET fencegate.token to the leader's: got %q, want %q", got, want)
				}
				setRows = d.rows
			}
			for s, want := range map[string]int{"leader": d.rows, "zombie": 0, "set": setRows} {
				if got := e.countLike(t, "drv", tag(s)+"-%"); got != want {
					t.Errorf("rows of the %s run: got %d stored, want %d", s, got, want)
				}
			}
		})
	}
}

// countLike counts table's rows whose v is LIKE pattern.
func (e *env) countLike(t *testing.T, table, pattern string) int {
	t.Helper()
	var n int
	if err := e.admin.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE v LIKE $1", pattern).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
