package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/proxy/coalesce"
	"github.com/fencegate/fencegate/proxy/postgres/pgdsn"
	"github.com/fencegate/fencegate/proxy/postgres/sqlcheck"
	"github.com/fencegate/fencegate/tokens"
)

// errClosed is returned by calls made after Close.
var errClosed = errors.New("postgres: backend closed")

// Pool limits. Connections are opened on demand (no minimum): an idle one
// is only a latency saving, and a background connect loop would only add
// noise while the server is down.
const (
	// maxConnLifetime recycles connections so server-side memory and
	// settings changes (ALTER ROLE ... SET) do not stay forever; the jitter
	// keeps the connections opened together from expiring together.
	maxConnLifetime       = time.Hour
	maxConnLifetimeJitter = 10 * time.Minute
	// maxConnIdleTime releases what a burst opened.
	maxConnIdleTime = 10 * time.Minute
	// healthCheckPeriod is how often idle connections are checked against
	// the two limits above.
	healthCheckPeriod = 30 * time.Second
	// pingIdleAfter is how long a connection may sit idle before it is
	// pinged on acquire, to catch connections the server closed (restart,
	// idle killer) before a write is sent on them.
	pingIdleAfter = time.Second
)

// Backend is fencegate's PostgreSQL backend: a connection pool that runs
// fenced writes. It is safe for concurrent use.
type Backend struct {
	cfg     Config
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig // for Migrate's dedicated connection
	host    string          // host:port for messages; never the password

	// epoch and brokenAt (nanoseconds since epoch, monotonic) record when a
	// connection was last found dead; see shouldPing.
	epoch    time.Time
	brokenAt atomic.Int64

	// co runs writes in batches, one per connection slot (coalesce.go).
	co *coalesce.Coalescer[*call]
	// recheck decides again on each write's token as it is about to be
	// sent (SetSendCheck).
	recheck coalesce.Recheck

	// sql checks callers' statements with PostgreSQL's parser.
	sql *sqlcheck.Checker
	// uncheckedSQL lets callers' SQL through unchecked, so tests can show
	// what the pipeline's own defences do when the SQL check misses.
	uncheckedSQL bool
}

// Stats returns counts of the batches of writes since Open: each batch is
// one round trip (besides preparing statements a connection has not seen).
func (b *Backend) Stats() coalesce.Stats { return b.co.Stats() }

// Open connects to the database at dsn (a libpq URL or key=value string) and
// checks that it answers. The error names the host, never the password.
// Cancelling ctx aborts the connection attempt. pool_* parameters in dsn
// are overridden by cfg and the package's pool limits.
func Open(ctx context.Context, dsn string, cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// Never pgx's error: it quotes the DSN, and masks only the
		// password shapes it recognises.
		return nil, fmt.Errorf("postgres: invalid DSN: %w", pgdsn.ParseError(err))
	}
	cc := pc.ConnConfig
	host := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	cc.ConnectTimeout = cfg.ConnectTimeout
	// In the startup packet: no round trip per write or per connection.
	cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	cc.RuntimeParams["application_name"] = cfg.ApplicationName
	// The SQL check reads backslashes in string literals as PostgreSQL does
	// with this on (the default since 9.1); with it off, a string could
	// hide SQL from the check. A batch that changes it closes its
	// connection (reportedParams).
	cc.RuntimeParams["standard_conforming_strings"] = "on"
	cc.BuildFrontend = limitFrontend(cc.BuildFrontend, maxMessageLen(cfg.MaxResultBytes))
	// Prepared and cached statements: a repeated write is one round trip.
	cc.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement

	checker, err := sqlcheck.New(sqlcheck.Config{MaxSleep: cfg.WriteTimeout, Allow: cfg.AllowSQL})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	b := &Backend{cfg: cfg, sql: checker, connCfg: cc.Copy(), host: host, epoch: time.Now()}
	b.co = coalesce.New(int(cfg.MaxConns), maxBatch, b.runBatch)
	pc.MaxConns = cfg.MaxConns
	pc.MinConns = 0
	pc.MinIdleConns = 0
	pc.MaxConnLifetime = maxConnLifetime
	pc.MaxConnLifetimeJitter = maxConnLifetimeJitter
	pc.MaxConnIdleTime = maxConnIdleTime
	pc.HealthCheckPeriod = healthCheckPeriod
	// A server that cannot answer a ping as fast as it accepts a connection
	// is not worth waiting for; open a new one instead.
	pc.PingTimeout = cfg.ConnectTimeout
	pc.ShouldPing = b.shouldPing
	pc.BeforeClose = func(conn *pgx.Conn) {
		// Already closed and not seen by release: a ping found it dead, as
		// opposed to the pool retiring it.
		if _, seen := conn.PgConn().CustomData()[releasedClosed]; conn.IsClosed() && !seen {
			b.markBroken()
		}
	}
	b.pool, err = pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: pool for %s: %w", host, err)
	}
	if err := b.Ping(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("postgres: cannot reach %s (database %q, user %q): %w", host, cc.Database, cc.User, oneLine(err))
	}
	return b, nil
}

// shouldPing decides whether pgxpool pings a connection before handing it
// out. Besides connections idle for over pingIdleAfter, it pings those
// released before another connection was last found dead: after a server
// restart the first dead connection costs at most one failed call, not one
// per pooled connection.
func (b *Backend) shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	if p.IdleDuration > pingIdleAfter {
		return true
	}
	broken := b.brokenAt.Load()
	return broken != 0 && int64(time.Since(b.epoch)-p.IdleDuration) <= broken
}

func (b *Backend) markBroken() {
	b.brokenAt.Store(int64(time.Since(b.epoch)))
}

// acquire returns a pooled connection for the caller's exclusive use until
// release. Its error means nothing was sent on behalf of the caller.
func (b *Backend) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	conn, err := b.pool.Acquire(ctx)
	if errors.Is(err, puddle.ErrClosedPool) {
		return nil, errClosed
	}
	return conn, err
}

// release returns conn to the pool, which closes it if it is broken, busy
// or inside a transaction. ctx is the caller's.
func (b *Backend) release(ctx context.Context, conn *pgxpool.Conn) {
	// Recorded here rather than in BeforeClose, which runs asynchronously,
	// so the caller's next call already pings. A connection closed because
	// ctx ended says nothing about the server.
	if pc := conn.Conn().PgConn(); pc.IsClosed() {
		pc.CustomData()[releasedClosed] = true
		if ctx.Err() == nil {
			b.markBroken()
		}
	}
	conn.Release()
}

// releasedClosed marks, in a connection's CustomData, a connection release
// found closed.
const releasedClosed = "fencegate.releasedClosed"

// Close closes the pool's connections and makes later calls fail. It waits
// for calls in progress to return their connections.
func (b *Backend) Close() {
	b.pool.Close()
}

// User returns the role the backend logs in as.
func (b *Backend) User() string { return b.connCfg.User }

// Host returns the host:port the backend connects to.
func (b *Backend) Host() string { return b.host }

// Ping checks that the database answers.
func (b *Backend) Ping(ctx context.Context) error {
	conn, err := b.acquire(ctx)
	if err != nil {
		return err
	}
	defer b.release(ctx, conn)
	return conn.Ping(ctx)
}

// Migrate applies fencegate's schema (package migrations) on a dedicated
// connection without statement timeout, so it can wait for another replica
// that is migrating at the same time. Cancelling ctx aborts the wait. The
// backend's role must be allowed to create the schema and roles: serve
// with a runtime role, and migrate with MigrateDSN and an admin's DSN.
func (b *Backend) Migrate(ctx context.Context) error {
	return migrate(ctx, b.connCfg.Copy(), b.host)
}

// MigrateDSN applies fencegate's schema on the database at dsn, as Migrate
// does, and makes each of runtimeRoles a member of migrations.RuntimeRole.
func MigrateDSN(ctx context.Context, dsn string, runtimeRoles ...string) error {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("postgres: invalid DSN: %w", pgdsn.ParseError(err))
	}
	host := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	if err := migrate(ctx, cc, host); err != nil {
		return err
	}
	if len(runtimeRoles) == 0 {
		return nil
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("postgres: grant on %s: %w", host, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, role := range runtimeRoles {
		if err := migrations.GrantRuntime(ctx, conn, role); err != nil {
			return fmt.Errorf("postgres: %s: %w", host, err)
		}
	}
	return nil
}

func migrate(ctx context.Context, cc *pgx.ConnConfig, host string) error {
	cc.RuntimeParams["statement_timeout"] = "0"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", host, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := migrations.Apply(ctx, conn); err != nil {
		return fmt.Errorf("postgres: migrate %s: %w", host, err)
	}
	return nil
}

// SchemaVersion returns the version of fencegate's schema applied on the
// database, 0 if none.
func (b *Backend) SchemaVersion(ctx context.Context) (int32, error) {
	conn, err := b.acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: schema version on %s: %w", b.host, err)
	}
	defer b.release(ctx, conn)
	return migrations.Version(ctx, conn.Conn())
}

// HighWater returns the fence's high-water mark and whether the fence exists.
func (b *Backend) HighWater(ctx context.Context, fence string) (tokens.Token, bool, error) {
	conn, err := b.acquire(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("postgres: read fence %q: %w", fence, err)
	}
	defer b.release(ctx, conn)
	var t int64
	err = conn.QueryRow(ctx, "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&t)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("postgres: read fence %q: %w", fence, err)
	}
	return tokens.Token(t), true, nil
}

// Fences returns every fence, ordered by name.
func (b *Backend) Fences(ctx context.Context) ([]Fence, error) {
	conn, err := b.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: list fences: %w", err)
	}
	defer b.release(ctx, conn)
	rows, err := conn.Query(ctx, "SELECT name, token, updated_at FROM fencegate.fences ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("postgres: list fences: %w", err)
	}
	fences, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fence, error) {
		var f Fence
		var t int64
		err := r.Scan(&f.Name, &t, &f.UpdatedAt)
		f.HighWater = tokens.Token(t)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list fences: %w", err)
	}
	return fences, nil
}

// ErrPrivileged is returned by CheckRole when fencegate is logged in as a
// superuser or as a member of migrations.OwnerRole: callers' statements
// would then run with the rights to move any fence's mark.
var ErrPrivileged = errors.New("postgres: logged in as a role that can move fence marks")

// CheckRole checks that the database is ready for fencegate to serve as
// the role it logged in as: fencegate's schema is at the version this
// binary needs, the role may run the fence check (migrations.RuntimeRole),
// and, unless allowPrivileged, the role is neither a superuser nor a member
// of migrations.OwnerRole (ErrPrivileged). Errors say what to run.
func (b *Backend) CheckRole(ctx context.Context, allowPrivileged bool) error {
	conn, err := b.acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: check role on %s: %w", b.host, err)
	}
	defer b.release(ctx, conn)
	user := b.connCfg.User
	notMigrated := func(v int32) error {
		return fmt.Errorf("postgres: fencegate's schema on %s is at version %d, this fencegate needs %d: run `fencegate migrate --postgres-dsn=<an admin DSN> --runtime-role=%s` (or serve with --postgres-migrate-dsn)",
			b.host, v, migrations.Latest(), user)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regprocedure('fencegate.advance(text, bigint)') IS NOT NULL").Scan(&exists); err != nil {
		return fmt.Errorf("postgres: check role %q on %s: %w", user, b.host, err)
	}
	if !exists {
		return notMigrated(0)
	}
	var super, owner, runtime, onPath bool
	err = conn.QueryRow(ctx, `SELECT r.rolsuper,
	       pg_has_role(current_user, $1, 'USAGE'),
	       has_function_privilege('fencegate.advance(text, bigint)', 'EXECUTE'),
	       'fencegate' = ANY (current_schemas(false))
	  FROM pg_roles r WHERE r.rolname = current_user`, migrations.OwnerRole).Scan(&super, &owner, &runtime, &onPath)
	if err != nil {
		return fmt.Errorf("postgres: check role %q on %s: %w", user, b.host, err)
	}
	switch {
	case (super || owner) && !allowPrivileged:
		what := "a superuser"
		if !super {
			what = "a member of " + migrations.OwnerRole
		}
		return fmt.Errorf("%w: %q on %s is %s; serve as a role made a member of %s with `fencegate migrate --runtime-role` (or pass --insecure)",
			ErrPrivileged, user, b.host, what, migrations.RuntimeRole)
	case onPath:
		// Unqualified names would find fencegate's objects, which the SQL
		// check only refuses when they are qualified.
		return fmt.Errorf("postgres: schema fencegate is on role %q's search_path on %s (a role named fencegate, or ALTER ROLE ... SET search_path): serve as another role, or take it off the path", user, b.host)
	case !runtime:
		return fmt.Errorf("postgres: role %q on %s may not run fencegate's fence check: run `fencegate migrate --postgres-dsn=<an admin DSN> --runtime-role=%s`",
			user, b.host, user)
	}
	v, err := migrations.Version(ctx, conn.Conn())
	if err != nil {
		return err
	}
	if v < migrations.Latest() {
		return notMigrated(v)
	}
	return nil
}

// Reset lowers the fence's high-water mark to mark (0 forgets the fence)
// with fencegate.reset, and returns the mark it had (0: no such fence). A
// mark at or above the current one changes nothing.
func (b *Backend) Reset(ctx context.Context, fence string, mark tokens.Token) (tokens.Token, error) {
	if mark > tokens.MaxTerm {
		return 0, fmt.Errorf("postgres: reset fence %q: mark %d is beyond PostgreSQL's bigint", fence, mark)
	}
	conn, err := b.acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: reset fence %q: %w", fence, err)
	}
	defer b.release(ctx, conn)
	var old int64
	if err := conn.QueryRow(ctx, "SELECT fencegate.reset($1, $2)", fence, int64(mark)).Scan(&old); err != nil {
		return 0, fmt.Errorf("postgres: reset fence %q: %w", fence, err)
	}
	return tokens.Token(old), nil
}

// oneLine is err with the lines pgx gives a failed connection (one for
// each address tried, the same one often twice) joined into one, each
// once: an error a command prints on one line. It unwraps to err.
func oneLine(err error) error {
	msg := err.Error()
	if !strings.ContainsAny(msg, "\r\n") {
		return err
	}
	var parts []string
	for _, l := range strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	return &flatError{msg: strings.Join(parts, " "), err: err}
}

type flatError struct {
	msg string
	err error
}

func (e *flatError) Error() string { return e.msg }
func (e *flatError) Unwrap() error { return e.err }
