package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/cmd/internal/addrflag"
	"github.com/fencegate/fencegate/cmd/internal/flagerr"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/pgterm"
	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/election/zookeeper"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/postgres/pgdsn"
	"github.com/fencegate/fencegate/proxy/postgres/sqlcheck"
	"github.com/fencegate/fencegate/proxy/redis"
)

// defaultPgSocketPort names the PostgreSQL listener's Unix socket
// (.s.PGSQL.<port>) when it has no TCP address to take the port from.
const defaultPgSocketPort = "7432"

// serveConfig is everything `fencegate serve` is configured with.
type serveConfig struct {
	EtcdEndpoints   string
	EtcdDialTimeout time.Duration
	ElectionPrefix  string
	PostgresDSN     string
	// PostgresMigrateDSN, when set, is an admin's DSN serve migrates
	// fencegate's schema with at start; PostgresDSN then needs no CREATE.
	PostgresMigrateDSN string
	// Insecure allows what fencegate refuses by default as unsafe: serving
	// as a PostgreSQL superuser or as the owner of fencegate's schema.
	Insecure  bool
	RedisAddr string
	GRPCAddr  string
	// PgListenAddr is the PostgreSQL wire-protocol listener; off when
	// empty.
	PgListenAddr string
	// PgUnixSocketDir, when set, is where the PostgreSQL listener also
	// listens on a Unix socket (.s.PGSQL.<port>).
	PgUnixSocketDir string
	TermSources     string
	routes          []election.Route
	// ZooKeeperServers reach the ZooKeeper of fences routed to the
	// zookeeper term source; off when empty.
	ZooKeeperServers        string
	ZooKeeperRoot           string
	ZooKeeperSessionTimeout time.Duration
	// RedisLease is where fences routed to redis-lease find their leases.
	RedisLease redisLeaseConfig
	// PostgresTerm configures the postgres-term source of the fences
	// --term-sources routes to it.
	PostgresTerm pgterm.Config
	// RedisListenAddr is the RESP (drop-in Redis) listener; off when
	// empty.
	RedisListenAddr string
	// RedisUnixSocket, when set, is a Unix socket the RESP listener also
	// listens on.
	RedisUnixSocket string
	// MaxClientConns bounds each drop-in listener's client connections.
	MaxClientConns  int
	HTTPAddr        string
	PprofAddr       string
	LogFormat       string
	LogLevel        string
	MaxBodyBytes    int
	ShutdownTimeout time.Duration
	HTTPServer      api.HTTPServerConfig
	Security        securityConfig
	Proxy           proxy.Config
	Postgres        postgres.Config
	Redis           redis.Config
	Deps            depsConfig

	// MetricsAddr is the plain-HTTP health and metrics listener; off
	// when empty.
	MetricsAddr string
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		EtcdEndpoints:           "127.0.0.1:2379",
		EtcdDialTimeout:         5 * time.Second,
		ElectionPrefix:          "/fencegate/elections",
		ZooKeeperRoot:           zookeeper.DefaultRoot,
		ZooKeeperSessionTimeout: zookeeper.DefaultSessionTimeout,
		GRPCAddr:                "127.0.0.1:7070",
		HTTPAddr:                "127.0.0.1:7080",
		LogFormat:               "text",
		LogLevel:                "info",
		MaxBodyBytes:            1 << 20,
		MaxClientConns:          10000,
		ShutdownTimeout:         10 * time.Second,
		HTTPServer:              api.DefaultHTTPServerConfig(),
		Security:                securityConfig{TLSMinVersion: "1.2", PolicyMode: "enforce"},
		Proxy:                   proxy.DefaultConfig(),
		Postgres:                postgres.DefaultConfig(),
		Redis:                   redis.DefaultConfig(),
		RedisLease:              redisLeaseConfig{KeyPattern: redislease.DefaultKeyPattern, CounterPattern: redislease.DefaultCounterPattern},
		PostgresTerm:            pgterm.Config{Table: pgterm.DefaultTable, LockKey: pgterm.DefaultLockKey, Poll: pgterm.DefaultPoll},
	}
}

// register defines the serve flags on fs, with c's values as defaults.
//
// backends is false for dev, which starts its own etcd and backends:
// their flags would be ignored there.
func (c *serveConfig) register(fs *flag.FlagSet, backends bool) {
	if backends {
		fs.StringVar(&c.EtcdEndpoints, "etcd-endpoints", c.EtcdEndpoints, "comma-separated etcd client endpoints; empty runs without etcd (only fences --term-sources routes elsewhere have terms)")
		fs.DurationVar(&c.EtcdDialTimeout, "etcd-dial-timeout", c.EtcdDialTimeout, "how long to wait for etcd at start")
	}
	fs.StringVar(&c.ElectionPrefix, "election-prefix", c.ElectionPrefix, "elections live under `<prefix>`/<name>/")
	fs.StringVar(&c.TermSources, "term-sources", c.TermSources, "comma-separated `PATTERN=KIND`: the fences PATTERN names (exact, or a prefix ending in *) take their terms from KIND, etcd (the default for every fence), zookeeper (see --zookeeper-servers), postgres-term (an advisory lock and a term table in --postgres-dsn's database), redis-lease (a Redis SET NX PX lease with an INCR counter) or monotonic (no election visible: only the high-water rule); see README")
	fs.StringVar(&c.ZooKeeperServers, "zookeeper-servers", c.ZooKeeperServers, "comma-separated ZooKeeper `host:port`s of the elections --term-sources routes to zookeeper (needed by such a route)")
	fs.StringVar(&c.ZooKeeperRoot, "zookeeper-election-root", c.ZooKeeperRoot, "ZooKeeper elections are the znodes `<root>`/<name>, their candidates its sequential children (Curator LeaderLatch, kazoo Election or Lock)")
	fs.DurationVar(&c.ZooKeeperSessionTimeout, "zookeeper-session-timeout", c.ZooKeeperSessionTimeout, "ZooKeeper session timeout fencegate asks for")
	c.RedisLease.register(fs)
	fs.StringVar(&c.PostgresTerm.Table, "postgres-term-table", c.PostgresTerm.Table, "postgres-term: the term table (name text primary key, term bigint not null), may be schema-qualified; fencegate_owner needs SELECT, UPDATE (term) on it")
	fs.StringVar(&c.PostgresTerm.LockKey, "postgres-term-lock-key", c.PostgresTerm.LockKey, "postgres-term: the advisory lock key of election <name>: hashtext (hashtext(name)) or hashtextextended (hashtextextended(name, 0))")
	fs.DurationVar(&c.PostgresTerm.Poll, "postgres-term-poll", c.PostgresTerm.Poll, "postgres-term: how often the terms of the fences seen are read again (tokens above them are read at once)")
	if backends {
		fs.StringVar(&c.PostgresDSN, "postgres-dsn", c.PostgresDSN, "PostgreSQL connection string; enables /sql. Its role must be a member of fencegate_runtime (fencegate migrate --runtime-role), not a superuser")
		fs.StringVar(&c.PostgresMigrateDSN, "postgres-migrate-dsn", c.PostgresMigrateDSN, "an admin's PostgreSQL connection string to apply fencegate's schema with at start, granting it to --postgres-dsn's role (default: only check that fencegate migrate was run)")
		fs.StringVar(&c.RedisAddr, "redis-addr", c.RedisAddr, "Redis host:port, or the absolute path of its Unix socket (unixsocket in redis.conf; the cheaper hop when Redis runs on fencegate's host); enables /redis")
		c.Deps.register(fs)
	}
	c.Security.register(fs)
	fs.IntVar(&c.Proxy.MaxInFlight, "max-in-flight", c.Proxy.MaxInFlight, "most writes in flight to each backend; past it writes get OVERLOADED")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.PgListenAddr, "pg-listen-addr", c.PgListenAddr, "PostgreSQL wire-protocol listen address: unmodified PostgreSQL clients connect here, every transaction fenced (off when empty; needs --postgres-dsn)")
	fs.StringVar(&c.PgUnixSocketDir, "pg-unix-socket-dir", c.PgUnixSocketDir, "directory of a Unix socket the PostgreSQL listener also listens on, as PostgreSQL and pgbouncer (unix_socket_dir) do: DIR/.s.PGSQL.PORT, PORT --pg-listen-addr's ("+defaultPgSocketPort+" without it), so psql -h DIR -p PORT reaches it (off when empty; needs --postgres-dsn)")
	fs.StringVar(&c.RedisListenAddr, "redis-listen-addr", c.RedisListenAddr, "RESP (drop-in Redis) listen address: unmodified Redis clients connect here with AUTH <fence> <token>, every command fenced (off when empty; needs --redis-addr)")
	fs.StringVar(&c.RedisUnixSocket, "redis-unix-socket", c.RedisUnixSocket, "path of a Unix socket the RESP listener also listens on, as Redis's unixsocket: redis-cli -s PATH reaches it (off when empty; needs --redis-addr)")
	fs.IntVar(&c.MaxClientConns, "max-client-conns", c.MaxClientConns, "most client connections each of --pg-listen-addr and --redis-listen-addr keeps open (pgbouncer's max_client_conn); one more is refused as the database would: PostgreSQL's 53300 too many clients, Redis's max number of clients")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP/JSON, health and metrics listen address")
	registerMetricsAddr(fs, &c.MetricsAddr)
	fs.StringVar(&c.PprofAddr, "pprof-addr", c.PprofAddr, "serve Go's net/http/pprof profiles on this address (off when empty; never expose it)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn or error")
	fs.IntVar(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest request accepted, in bytes")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long to drain requests on SIGINT/SIGTERM")
	fs.IntVar(&c.Proxy.MaxStatements, "max-statements", c.Proxy.MaxStatements, "most statements or commands in one write")
	fs.IntVar(&c.Proxy.MaxParams, "max-params", c.Proxy.MaxParams, "most parameters of one statement")
	fs.DurationVar(&c.Proxy.VerifyTimeout, "verify-timeout", c.Proxy.VerifyTimeout, "deadline of the etcd read that verifies a new term")
	fs.Float64Var(&c.Proxy.VerifyRate, "verify-rate", c.Proxy.VerifyRate, "etcd reads a second, per fence, to verify tokens above every known term; beyond the burst, writes get OVERLOADED")
	fs.IntVar(&c.Proxy.VerifyBurst, "verify-burst", c.Proxy.VerifyBurst, "most etcd reads at once, per fence, verifying tokens above every known term (see --verify-rate)")
	fs.IntVar(&c.Proxy.VerifyFences, "verify-fences", c.Proxy.VerifyFences, "most fences with a verification budget of their own (memory); the rest share one")
	fs.DurationVar(&c.HTTPServer.ReadTimeout, "http-read-timeout", c.HTTPServer.ReadTimeout, "most time to read an HTTP request, body included")
	fs.DurationVar(&c.HTTPServer.WriteTimeout, "http-write-timeout", c.HTTPServer.WriteTimeout,
		"most time from an HTTP request's headers to the end of its answer; must exceed --statement-timeout plus --verify-timeout")
	fs.DurationVar(&c.HTTPServer.IdleTimeout, "http-idle-timeout", c.HTTPServer.IdleTimeout, "how long an idle keep-alive HTTP connection is kept")
	fs.IntVar(&c.HTTPServer.MaxHeaderBytes, "http-max-header-bytes", c.HTTPServer.MaxHeaderBytes, "largest HTTP request headers accepted, in bytes")
	fs.DurationVar(&c.Postgres.StatementTimeout, "statement-timeout", c.Postgres.StatementTimeout, "PostgreSQL statement_timeout of fenced writes")
	fs.Int64Var(&c.Postgres.MaxResultRows, "max-result-rows", c.Postgres.MaxResultRows, "most rows one SQL write's statements may return together; past it the write fails and rolls back")
	fs.Int64Var(&c.Postgres.MaxResultBytes, "max-result-bytes", c.Postgres.MaxResultBytes, "most bytes of rows one SQL write's statements may return together; past it the write fails and rolls back")
	fs.Func("postgres-allow-sql", "comma-separated statement kinds callers may send beyond SELECT, INSERT, UPDATE, DELETE and MERGE: truncate, lock, ddl (for trusted deployments; what would break the fence stays refused)", func(s string) error {
		for _, name := range strings.Split(s, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if err := sqlcheck.CheckAllow(name); err != nil {
					return err
				}
				c.Postgres.AllowSQL = append(c.Postgres.AllowSQL, name)
			}
		}
		return nil
	})
	fs.DurationVar(&c.Postgres.WriteTimeout, "write-timeout", c.Postgres.WriteTimeout, "time limit of a whole PostgreSQL write, all its statements and its commit")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow what is refused as unsafe: listening beyond loopback without --cert-file and --policy-file, serving as a PostgreSQL superuser or schema owner, whose rights callers' statements would have, sending --redis-password in plain text beyond loopback, trusting files others may write (or a --key-file they may read), and dev's --etcd-listen beyond loopback")
	fs.IntVar(&c.Redis.PoolSize, "redis-pool-size", c.Redis.PoolSize, "most Redis connections in the pool")
	// Still accepted so that existing command lines keep working; nothing
	// reads the deprecated redis.Config.CheckSlots, so the value is dropped.
	fs.Bool("redis-check-slots", true,
		"deprecated and ignored: every Redis key must carry the fence's {<fence>} hash tag, which also keeps it in the fence's slot")
	fs.IntVar(&c.Redis.MaxValueBytes, "redis-max-value-bytes", c.Redis.MaxValueBytes,
		"largest Redis value one write may pass or create (each argument; what SETRANGE, SETBIT and APPEND would make)")
	fs.IntVar(&c.Redis.MaxReplyBytes, "redis-max-reply-bytes", c.Redis.MaxReplyBytes,
		"largest total reply of one Redis write; a larger one is refused and the write rolled back")
	fs.Func("redis-allow", "comma-separated Redis commands to allow beyond the default allowlist", func(s string) error {
		for _, name := range strings.Split(s, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if err := redis.CheckAllow(name); err != nil {
					return err
				}
				c.Redis.Allow = append(c.Redis.Allow, name)
			}
		}
		return nil
	})
	maxConns := int(c.Postgres.MaxConns)
	fs.Func("postgres-max-conns", fmt.Sprintf("most PostgreSQL connections in the pool (default 4 per CPU: %d here)", maxConns), func(s string) error {
		var n int32
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			return errors.New("want a positive integer")
		}
		c.Postgres.MaxConns = n
		return nil
	})
}

// validate checks the flags, and what each needs of the others. Its
// errors are usage errors: they name the flag to change.
func (c *serveConfig) validate() error {
	return usage(c.check())
}

func (c *serveConfig) check() error {
	if err := c.checkRanges(); err != nil {
		return err
	}
	if err := c.checkAddrs(); err != nil {
		return err
	}
	if err := checkDSN("--postgres-dsn", c.PostgresDSN); err != nil {
		return err
	}
	if err := checkDSN("--postgres-migrate-dsn", c.PostgresMigrateDSN); err != nil {
		return err
	}
	if err := c.Deps.checkRedisAddrs(c.Insecure, [2]string{"--redis-addr", c.RedisAddr}, [2]string{"--redis-lease-addr", c.RedisLease.Addr}); err != nil {
		return err
	}
	routes, err := election.ParseRoutes(c.TermSources)
	if err != nil {
		return fmt.Errorf("--term-sources: %w", err)
	}
	c.routes = routes
	if c.routesTo(election.SourceZooKeeper) && len(c.zooKeeperServers()) == 0 {
		return errors.New("--term-sources routes fences to zookeeper, and --zookeeper-servers is empty")
	}
	if c.ZooKeeperSessionTimeout <= 0 {
		return fmt.Errorf("--zookeeper-session-timeout must be positive, got %v", c.ZooKeeperSessionTimeout)
	}
	if err := c.RedisLease.validate(); err != nil {
		return err
	}
	if routesKind(routes, election.SourceRedisLease) && c.RedisLease.Addr == "" && c.RedisAddr == "" {
		return fmt.Errorf("--term-sources routes fences to %s: set --redis-lease-addr or --redis-addr", election.SourceRedisLease)
	}
	if c.routesTo(election.SourcePostgresTerm) {
		switch c.PostgresTerm.LockKey {
		case postgres.LockKeyHashtext, postgres.LockKeyHashtextExtended:
		default:
			return fmt.Errorf("--postgres-term-lock-key=%s: want hashtext or hashtextextended", c.PostgresTerm.LockKey)
		}
		if c.PostgresTerm.Poll < 10*time.Millisecond {
			return fmt.Errorf("--postgres-term-poll=%v: want at least 10ms", c.PostgresTerm.Poll)
		}
	}
	if c.MaxClientConns < 1 {
		return fmt.Errorf("--max-client-conns must be at least 1, got %d", c.MaxClientConns)
	}
	if c.MaxBodyBytes < 1024 {
		return fmt.Errorf("--max-body-bytes must be at least 1024, got %d", c.MaxBodyBytes)
	}
	if err := c.Security.validate(); err != nil {
		return err
	}
	if err := c.Security.checkExposure(c.Insecure, [2]string{"--grpc-addr", c.GRPCAddr}, [2]string{"--http-addr", c.HTTPAddr}, [2]string{"--pg-listen-addr", c.PgListenAddr}, [2]string{"--redis-listen-addr", c.RedisListenAddr}); err != nil {
		return err
	}
	if c.PprofAddr != "" && !isLoopbackAddr(c.PprofAddr) && !c.Insecure {
		return fmt.Errorf("--pprof-addr %s is reachable from other hosts, and pprof has no TLS or authentication: listen on loopback, or pass --insecure", c.PprofAddr)
	}
	if err := checkMetricsAddr(c.MetricsAddr, c.Security.PolicyFile, c.Insecure); err != nil {
		return err
	}
	c.Proxy.PolicyShadow = c.Security.PolicyMode == "shadow"
	if err := c.Proxy.Validate(); err != nil {
		return err
	}
	if err := c.HTTPServer.Validate(); err != nil {
		return err
	}
	if longest := c.Postgres.StatementTimeout + c.Proxy.VerifyTimeout; c.HTTPServer.WriteTimeout <= longest {
		return fmt.Errorf("--http-write-timeout %v must exceed --statement-timeout plus --verify-timeout (%v), or answers of slow writes are cut off", c.HTTPServer.WriteTimeout, longest)
	}
	return nil
}

// checkAddrs refuses an address flag that is malformed, naming it, before
// the checks that read its host (checkExposure) and before anything
// listens or dials.
func (c *serveConfig) checkAddrs() error {
	for _, a := range []struct{ flag, addr, example string }{
		{"--grpc-addr", c.GRPCAddr, "127.0.0.1:7070"},
		{"--http-addr", c.HTTPAddr, "127.0.0.1:7080"},
		{"--pg-listen-addr", c.PgListenAddr, "127.0.0.1:7432"},
		{"--redis-listen-addr", c.RedisListenAddr, "127.0.0.1:7379"},
		{"--metrics-addr", c.MetricsAddr, "127.0.0.1:9090"},
		{"--pprof-addr", c.PprofAddr, "127.0.0.1:6060"},
	} {
		if a.addr == "" {
			continue // off
		}
		if err := addrflag.HostPort(a.flag, a.addr, a.example); err != nil {
			return err
		}
	}
	for _, a := range []struct{ flag, addr string }{
		{"--redis-addr", c.RedisAddr},
		{"--redis-lease-addr", c.RedisLease.Addr},
	} {
		if a.addr == "" {
			continue
		}
		if err := addrflag.HostPortOrSocket(a.flag, a.addr, "127.0.0.1:6379"); err != nil {
			return err
		}
	}
	if err := addrflag.EtcdEndpoints("--etcd-endpoints", c.EtcdEndpoints); errors.Is(err, addrflag.ErrCredentials) {
		return fmt.Errorf("%w (the password best as FENCEGATE_ETCD_PASSWORD, which ps does not show)", err)
	} else if err != nil {
		return err
	}
	for _, s := range c.zooKeeperServers() {
		// Without a port, the ZooKeeper client takes 2181.
		if strings.Contains(s, ":") {
			if err := addrflag.HostPort("--zookeeper-servers", s, "127.0.0.1:2181"); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkDSN refuses a PostgreSQL connection string that does not parse,
// with the flag and the reason only: never the string, which may hold a
// password that pgx's error would show (pgdsn).
func checkDSN(flagName, dsn string) error {
	if dsn == "" {
		return nil
	}
	if _, err := pgxpool.ParseConfig(dsn); err != nil {
		return fmt.Errorf("%s: %w", flagName, pgdsn.ParseError(err))
	}
	return nil
}

// routesTo reports whether --term-sources routes any fence to kind.
func (c *serveConfig) routesTo(kind string) bool {
	for _, r := range c.routes {
		if r.Kind == kind {
			return true
		}
	}
	return false
}

func (c *serveConfig) zooKeeperServers() []string {
	var out []string
	for _, s := range strings.Split(c.ZooKeeperServers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// withoutEtcd: --etcd-endpoints is empty, fencegate runs without etcd.
func (c *serveConfig) withoutEtcd() bool { return len(c.endpoints()) == 0 }

func (c *serveConfig) endpoints() []string {
	var out []string
	for _, e := range strings.Split(c.EtcdEndpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from the environment variable FENCEGATE_<FLAG> (upper case,
// '-' as '_'). --help prints the usage to stdout. A mistake is a
// *usageError.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, summary string) error {
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: fencegate %s [flags]\n\n%s\n\nFlags (each also read from FENCEGATE_<FLAG>, e.g. FENCEGATE_POSTGRES_DSN):\n", fs.Name(), summary)
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	// A parse error is one line (main prints it), not the error and then
	// the whole usage, which would scroll it off the screen.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usage(errors.New(flagerr.Explain(err, fs)))
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q: %s takes flags only", fs.Arg(0), fs.Name())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := "FENCEGATE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("%s=%q (--%s): %s", env, v, f.Name, flagerr.Reason(f, e.Error()))
			}
		}
	})
	return err
}

// Upper bounds of the Redis limits (proxy/redis's own, for its checks).
const (
	maxRedisValueBytes = 512 << 20
	maxRedisReplyBytes = 1 << 30
)

// checkRanges refuses a limit flag out of its range, naming the flag: the
// libraries' own checks name their Config fields, and PostgreSQL's and
// Redis's run only once the backend answers.
func (c *serveConfig) checkRanges() error {
	ms := time.Millisecond
	for _, r := range []struct {
		ok   bool
		flag string
		got  any
		want string
	}{
		{c.EtcdDialTimeout > 0, "--etcd-dial-timeout", c.EtcdDialTimeout, "a positive duration"},
		{c.ShutdownTimeout >= 0, "--shutdown-timeout", c.ShutdownTimeout, "a duration from 0"},
		{c.Proxy.MaxInFlight >= 1, "--max-in-flight", c.Proxy.MaxInFlight, "at least 1"},
		{c.Proxy.MaxStatements >= 1, "--max-statements", c.Proxy.MaxStatements, "at least 1"},
		{c.Proxy.MaxParams >= 0 && c.Proxy.MaxParams <= 65535, "--max-params", c.Proxy.MaxParams, "0 to 65535"},
		{c.Proxy.VerifyTimeout > 0, "--verify-timeout", c.Proxy.VerifyTimeout, "a positive duration"},
		{c.Proxy.VerifyRate > 0 && !math.IsInf(c.Proxy.VerifyRate, 0), "--verify-rate", c.Proxy.VerifyRate, "a positive number of reads a second"},
		{c.Proxy.VerifyBurst >= 1, "--verify-burst", c.Proxy.VerifyBurst, "at least 1"},
		{c.Proxy.VerifyFences >= 1, "--verify-fences", c.Proxy.VerifyFences, "at least 1"},
		{c.HTTPServer.ReadTimeout >= c.HTTPServer.ReadHeaderTimeout, "--http-read-timeout", c.HTTPServer.ReadTimeout, fmt.Sprintf("at least %v, the time to read the headers", c.HTTPServer.ReadHeaderTimeout)},
		{c.HTTPServer.WriteTimeout > 0, "--http-write-timeout", c.HTTPServer.WriteTimeout, "a positive duration"},
		{c.HTTPServer.IdleTimeout > 0, "--http-idle-timeout", c.HTTPServer.IdleTimeout, "a positive duration"},
		{c.HTTPServer.MaxHeaderBytes >= 4096, "--http-max-header-bytes", c.HTTPServer.MaxHeaderBytes, "at least 4096"},
		// 0 is the default for these (for --write-timeout,
		// --statement-timeout's), as it was before they were checked here.
		{c.Postgres.StatementTimeout == 0 || c.Postgres.StatementTimeout >= ms, "--statement-timeout", c.Postgres.StatementTimeout, "at least 1ms, or 0 for the default"},
		{c.Postgres.WriteTimeout == 0 || c.Postgres.WriteTimeout >= ms, "--write-timeout", c.Postgres.WriteTimeout, "at least 1ms, or 0 for --statement-timeout's"},
		{c.Postgres.MaxResultRows >= 0, "--max-result-rows", c.Postgres.MaxResultRows, "at least 1, or 0 for the default"},
		{c.Postgres.MaxResultBytes >= 0, "--max-result-bytes", c.Postgres.MaxResultBytes, "at least 1, or 0 for the default"},
		{c.Redis.PoolSize >= 0, "--redis-pool-size", c.Redis.PoolSize, "at least 1, or 0 for the default"},
		{c.Redis.MaxValueBytes >= 0 && c.Redis.MaxValueBytes <= maxRedisValueBytes, "--redis-max-value-bytes", c.Redis.MaxValueBytes, fmt.Sprintf("1 to %d, or 0 for the default", maxRedisValueBytes)},
		{c.Redis.MaxReplyBytes == 0 || c.Redis.MaxReplyBytes >= c.Redis.MaxValueBytes && c.Redis.MaxReplyBytes <= maxRedisReplyBytes, "--redis-max-reply-bytes", c.Redis.MaxReplyBytes, fmt.Sprintf("from --redis-max-value-bytes (%d) to %d, or 0 for the default", c.Redis.MaxValueBytes, maxRedisReplyBytes)},
	} {
		if !r.ok {
			return fmt.Errorf("%s=%v: want %s", r.flag, r.got, r.want)
		}
	}
	return nil
}
