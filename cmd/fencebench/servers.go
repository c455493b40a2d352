package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/embedded"
	"github.com/fencegate/fencegate/election/freeport"
	"github.com/fencegate/fencegate/migrations"
	pgthrowaway "github.com/fencegate/fencegate/proxy/postgres/throwaway"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// env is the servers of one run: etcd, PostgreSQL, Redis and the gateway.
type env struct {
	dir  string
	etcd *embedded.Server
	pg   *pgthrowaway.Server
	rd   *redisthrowaway.Server
	gate *gateway
	// secure is the gateway of the secure paths (secure.go); nil when
	// none is measured.
	secure *gateway
	pki    *benchPKI
	// bouncer is pgbouncer in front of pg (pgbouncer.go); nil when the
	// pg-bouncer paths are not measured.
	bouncer *bouncer
	// twem is nutcracker in front of rd (twemproxy.go); nil when the
	// redis-twemproxy path is not measured.
	twem   *twemproxy
	cli    *clientv3.Client // the bench's etcd client (campaigns)
	admin  *pgx.Conn        // the bench's own PostgreSQL session (setup, counters)
	radmin *goredis.Client  // the bench's own Redis client (counters)

	pgDSN string
	// pgGatewayDSN is the role fencegate serves as.
	pgGatewayDSN string
	// workerDSN is the role the PostgreSQL paths' clients log in as,
	// directly or through pgbouncer: a member of fencegate_runtime (the
	// fenced paths call fencegate.advance) that is not a superuser.
	// Through fencegate's listener they log in as benchListenerRole,
	// which has no fencegate role, as the listener requires.
	workerDSN string
	redisAddr string
	// proxiedRedis is where fencegate and nutcracker reach Redis:
	// redisAddr, or its Unix socket with --backend-unix.
	proxiedRedis string
}

// startEnv starts every server. Close stops them.
func startEnv(ctx context.Context, cfg config) (*env, error) {
	dir, err := os.MkdirTemp("", "fencebench-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	logf("starting embedded etcd, throwaway PostgreSQL and Redis in %s", dir)
	e.etcd, err = embedded.Start(ctx, embedded.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: cfg.etcdNoFsync})
	if err != nil {
		return nil, err
	}
	e.pg, err = pgthrowaway.Start(ctx, pgthrowaway.Options{})
	if err != nil {
		return nil, err
	}
	e.rd, err = redisthrowaway.Start(ctx, redisthrowaway.Options{UnixSocket: cfg.backendUnix})
	if err != nil {
		return nil, err
	}
	e.pgDSN, e.redisAddr = e.pg.DSN(), e.rd.Addr()
	// 64 clients on each of pgbouncer (which keeps its server connections)
	// and fencegate's listener, plus the pools: more than the default 100.
	if err := raiseMaxConnections(ctx, e.pg, 400); err != nil {
		return nil, err
	}
	e.cli, err = clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	e.admin, err = pgx.Connect(ctx, e.pgDSN)
	if err != nil {
		return nil, err
	}
	// fencegate applies the same schema on start; direct paths need it too.
	if err := migrations.Apply(ctx, e.admin); err != nil {
		return nil, err
	}
	if _, err := e.admin.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_ledger(id bigserial PRIMARY KEY, worker text NOT NULL, token bigint NOT NULL)`); err != nil {
		return nil, err
	}
	// fencegate serves as a role that is not a superuser, as deployed.
	if e.pgGatewayDSN, err = e.pg.RuntimeRole(ctx, "fencegate_bench"); err != nil {
		return nil, err
	}
	if e.workerDSN, err = e.pg.RuntimeRole(ctx, benchWorkerRole); err != nil {
		return nil, err
	}
	if _, err = e.pg.ListenerRole(ctx, benchListenerRole); err != nil {
		return nil, err
	}
	// Where fencegate, pgbouncer and nutcracker reach the databases.
	pgHost := "127.0.0.1"
	e.proxiedRedis = e.redisAddr
	if cfg.backendUnix {
		pgHost, e.proxiedRedis = e.pg.SocketDir(), e.rd.SocketPath()
		// A host in the query overrides the URL's (pgconn.ParseConfig).
		e.pgGatewayDSN += "&host=" + url.QueryEscape(pgHost)
	}
	if cfg.wants("load") && (cfg.wantsPath(pgBouncer) || cfg.wantsPath(pgBouncerFenced)) || cfg.runs("pgbench") {
		if e.bouncer, err = startBouncer(ctx, pgHost, e.pg.Port(), benchWorkerRole); err != nil {
			return nil, err
		}
	}
	if cfg.wants("load") && (cfg.wantsPath(redisTwemproxy) || cfg.wantsPath(redisTwemproxyFenced)) || cfg.runs("redisbench") {
		if e.twem, err = startTwemproxy(ctx, e.proxiedRedis); err != nil {
			return nil, err
		}
	}
	e.radmin = goredis.NewClient(&goredis.Options{Addr: e.redisAddr, Protocol: 2, DisableIdentity: true})
	e.gate, err = startGateway(ctx, cfg, dir, e, "fencegate", nil, nil)
	if err != nil {
		return nil, err
	}
	if cfg.wantsSecure() {
		if e.pki, err = newBenchPKI(filepath.Join(dir, "tls")); err != nil {
			return nil, err
		}
		if err := grantBenchWriter(ctx, e.admin, "fencegate_bench"); err != nil {
			return nil, err
		}
		e.secure, err = startGateway(ctx, cfg, dir, e, "fencegate-secure", e.pki.args(), e.pki.client)
		if err != nil {
			return nil, err
		}
	}
	ok = true
	return e, nil
}

// Close stops everything started, in reverse.
func (e *env) Close() {
	if e.secure != nil {
		e.secure.Close()
	}
	if e.gate != nil {
		e.gate.Close()
	}
	if e.bouncer != nil {
		e.bouncer.Close()
	}
	if e.twem != nil {
		e.twem.Close()
	}
	if e.radmin != nil {
		_ = e.radmin.Close()
	}
	if e.admin != nil {
		_ = e.admin.Close(context.Background())
	}
	if e.cli != nil {
		_ = e.cli.Close()
	}
	if e.rd != nil {
		_ = e.rd.Close()
	}
	if e.pg != nil {
		_ = e.pg.Close()
	}
	if e.etcd != nil {
		e.etcd.Close()
	}
	_ = os.RemoveAll(e.dir)
}

// truncate empties the ledger between loads so every path starts alike.
func (e *env) truncate(ctx context.Context) error {
	_, err := e.admin.Exec(ctx, "TRUNCATE bench_ledger")
	return err
}

// benchWorkerRole is the role of the PostgreSQL paths' clients, and
// benchListenerRole that of pg-wire's.
const (
	benchWorkerRole   = "bench_worker"
	benchListenerRole = "bench_listener"
)

// raiseMaxConnections sets max_connections and restarts the server.
func raiseMaxConnections(ctx context.Context, pg *pgthrowaway.Server, n int) error {
	c, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		return err
	}
	_, err = c.Exec(ctx, "ALTER SYSTEM SET max_connections = "+strconv.Itoa(n))
	_ = c.Close(ctx)
	if err != nil {
		return err
	}
	return pg.Restart(ctx)
}

// gateway is bin/fencegate serve running as a child process.
type gateway struct {
	name      string
	cmd       *exec.Cmd
	grpcAddr  string
	httpAddr  string
	pgAddr    string // the PostgreSQL listener; empty on the secure gateway
	respAddr  string // the RESP listener; empty on the secure gateway
	pprofAddr string
	logPath   string
	done      chan struct{}
	// tls is the client TLS config toward it; nil: plain TCP.
	tls *tls.Config
	hc  *http.Client
}

// httpURL is the gateway's URL for path.
func (g *gateway) httpURL(path string) string {
	if g.tls != nil {
		return "https://" + g.httpAddr + path
	}
	return "http://" + g.httpAddr + path
}

// startGateway starts bin/fencegate serve as name, with extra flags after
// the common ones; clients reach it over TLS with tc when not nil.
func startGateway(ctx context.Context, cfg config, dir string, e *env, name string, extra []string, tc *tls.Config) (*gateway, error) {
	bin, err := filepath.Abs(cfg.fencegate)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("fencegate binary %s not found (run make build, or pass --fencegate): %w", cfg.fencegate, err)
	}
	g := &gateway{
		name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{}), tls: tc,
		hc: &http.Client{Transport: &http.Transport{TLSClientConfig: tc}},
	}
	if g.grpcAddr, err = freeport.Pick(); err != nil {
		return nil, err
	}
	if g.httpAddr, err = freeport.Pick(); err != nil {
		return nil, err
	}
	args := []string{
		"serve",
		"--etcd-endpoints=" + strings.Join(e.etcd.Endpoints(), ","),
		"--postgres-dsn=" + e.pgGatewayDSN,
		"--redis-addr=" + e.proxiedRedis,
		"--grpc-addr=" + g.grpcAddr,
		"--http-addr=" + g.httpAddr,
	}
	if tc == nil {
		if g.pgAddr, err = freeport.Pick(); err != nil {
			return nil, err
		}
		args = append(args, "--pg-listen-addr="+g.pgAddr)
		if g.respAddr, err = freeport.Pick(); err != nil {
			return nil, err
		}
		args = append(args, "--redis-listen-addr="+g.respAddr)
	}
	if cfg.profileDir != "" {
		if g.pprofAddr, err = freeport.Pick(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-addr="+g.pprofAddr)
	}
	if cfg.pgConns > 0 {
		args = append(args, "--postgres-max-conns="+strconv.Itoa(cfg.pgConns))
	}
	args = append(append(args, extra...), strings.Fields(cfg.gateArgs)...)
	logFile, err := os.Create(g.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	g.cmd = exec.Command(bin, args...)
	g.cmd.Stdout, g.cmd.Stderr = logFile, logFile
	// Only FENCEGATE_ variables the bench sets reach the gateway.
	g.cmd.Env = withoutFencegateEnv(os.Environ())
	if cfg.gateProcs > 0 {
		g.cmd.Env = append(g.cmd.Env, "GOMAXPROCS="+strconv.Itoa(cfg.gateProcs))
	}
	if cfg.gateGodebug != "" {
		// Appended last, so it is the value the runtime reads.
		g.cmd.Env = append(g.cmd.Env, "GODEBUG="+cfg.gateGodebug)
	}
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	logf("%s pid %d: gRPC %s, HTTP %s (log %s)", name, g.cmd.Process.Pid, g.grpcAddr, g.httpAddr, g.logPath)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := g.ready(ctx); err == nil {
			return g, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			g.Close()
			return nil, fmt.Errorf("%s not ready: %w; log: %s", name, err, g.logTail())
		}
		select {
		case <-g.done:
			return nil, fmt.Errorf("%s exited: %s", name, g.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func withoutFencegateEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FENCEGATE_") {
			out = append(out, kv)
		}
	}
	return out
}

func (g *gateway) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.httpURL("/readyz"), nil)
	resp, err := g.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(string(body)))
	}
	return nil
}

func (g *gateway) logTail() string {
	b, _ := os.ReadFile(g.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

func (g *gateway) pid() int { return g.cmd.Process.Pid }

// Close stops the gateway: SIGTERM, then SIGKILL after 5 s.
func (g *gateway) Close() {
	g.hc.CloseIdleConnections()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// cpuTime returns the process's user+system CPU time so far.
func cpuTime(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return time.Duration(f[11]+f[12]) * time.Second / clockTicks, nil
}

// treeCPUTime returns the CPU time of pid and its children, live (their
// own utime+stime) and reaped (pid's cutime+cstime): a PostgreSQL server and
// its backends.
func treeCPUTime(pid int) (time.Duration, error) {
	self, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	ticks := self[11] + self[12] + self[13] + self[14]
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		cpid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(d, "/proc/"), "/stat"))
		if cpid == pid {
			continue
		}
		f, err := statFields(cpid)
		if err != nil || f[1] != int64(pid) {
			continue
		}
		ticks += f[11] + f[12]
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// statFields returns the numeric fields of /proc/<pid>/stat from field 3
// (state, as 0) on; ppid is [1], utime [11], stime [12], cutime [13],
// cstime [14].
func statFields(pid int) ([]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return nil, errors.New("short /proc stat")
	}
	out := make([]int64, 15)
	for j := 1; j < 15; j++ {
		out[j], _ = strconv.ParseInt(f[j], 10, 64)
	}
	return out, nil
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// memStatus returns VmRSS and VmHWM in MiB.
func memStatus(pid int) (rss, hwm float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, k := range []string{"VmRSS:", "VmHWM:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				if k == "VmRSS:" {
					rss = kb / 1024
				} else {
					hwm = kb / 1024
				}
			}
		}
	}
	return rss, hwm, sc.Err()
}

// machineBusy returns the CPU time all processors spent busy so far (user,
// nice, system, irq, softirq, steal) from /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, errors.New("malformed /proc/stat")
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ownCPU is the CPU time of the benchmark's processes: itself (with the
// embedded etcd), fencegate, PostgreSQL and Redis.
func (e *env) ownCPU() time.Duration {
	self, _ := cpuTime(os.Getpid())
	gate, _ := cpuTime(e.gate.pid())
	if e.secure != nil {
		sg, _ := cpuTime(e.secure.pid())
		gate += sg
	}
	pg, _ := treeCPUTime(e.pg.PID())
	rd, _ := cpuTime(e.rd.PID())
	return self + gate + pg + rd
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// machine describes the machine for the report.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			mem = fmt.Sprintf(", %.0f GiB RAM", kb/1024/1024)
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d × %s%s%s", numCPU(), model, mem, kernel)
}
