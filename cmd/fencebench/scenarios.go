package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

const electionPrefix = election.DefaultPrefix

func tokenOf(t int64) tokens.Token { return tokens.Token(t) }

// bench is one run's state.
type bench struct {
	cfg   config
	env   *env
	rep   *report
	gconn *grpc.ClientConn // for single writes (setup, probes)
	gw    fencegatev1.GatewayClient
}

func run(ctx context.Context, cfg config) error {
	started := time.Now()
	e, err := startEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	b := &bench{cfg: cfg, env: e, rep: newReport(cfg)}
	b.rep.loadStart = loadAvg()
	busy0, _ := machineBusy()
	own0 := e.ownCPU()
	wall0 := time.Now()
	b.gconn, err = grpc.NewClient(e.gate.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer b.gconn.Close()
	b.gw = fencegatev1.NewGatewayClient(b.gconn)

	steps := []struct {
		part string
		f    func(context.Context) error
	}{
		{"load", b.runLoads},
		{"sqlcheck", b.runSQLCheck}, // after load, to take its 1-client write p50
		{"stale", b.runStale},
		{"pgbench", b.runPgbench},
		{"redisbench", b.runRedisbench},
		{"propagation", func(ctx context.Context) error { return b.runPropagation(ctx, "term-propagation", cfg.propTrials) }},
		{"failover", b.runFailover},
		{"elections", b.runManyElections},
	}
	for _, s := range steps {
		if !cfg.runs(s.part) {
			continue
		}
		if err := s.f(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.part, err)
		}
	}
	if cfg.profileDir != "" {
		if err := saveHeapProfile(ctx, e.gate.pprofAddr, filepath.Join(cfg.profileDir, "heap.pprof")); err != nil {
			logf("heap profile: %v", err)
		}
	}
	b.rep.took = time.Since(started)
	b.rep.loadEnd = loadAvg()
	if busy1, err := machineBusy(); err == nil {
		wall := time.Since(wall0)
		other := (busy1 - busy0) - (e.ownCPU() - own0)
		b.rep.otherCPU = max(0, other.Seconds()/wall.Seconds())
		b.rep.busy = (busy1 - busy0).Seconds() / wall.Seconds()
	}
	b.rep.printTable(os.Stdout)
	if cfg.markdown != "" {
		if err := b.rep.writeMarkdown(cfg.markdown); err != nil {
			return err
		}
		logf("report written to %s", cfg.markdown)
	}
	return nil
}

// emit records a result and prints its JSON line.
func (b *bench) emit(r result) {
	b.rep.add(r)
	if b.cfg.json {
		fmt.Println(r.jsonLine())
	}
}

// campaign makes a leader of election name with the bench's etcd client.
func (b *bench) campaign(ctx context.Context, name string, ttl time.Duration) (*election.Leadership, error) {
	return election.Campaign(ctx, b.env.cli, election.CampaignConfig{Election: name, Value: "fencebench", TTL: ttl})
}

// runLoads measures every path: distinct fences (one leader and fence per
// client) and one hot fence shared by all clients.
func (b *bench) runLoads(ctx context.Context) error {
	maxClients := slices.Max(append(slices.Clone(b.cfg.clients), b.cfg.hotClients...))
	logf("campaigning for %d distinct fences and one hot fence", maxClients)
	distinct := make([]target, maxClients)
	var leaders []*election.Leadership
	defer func() {
		for _, l := range leaders {
			_ = l.Resign(context.WithoutCancel(ctx))
		}
	}()
	for i := range distinct {
		name := fmt.Sprintf("bench-d-%d", i)
		l, err := b.campaign(ctx, name, 30*time.Second)
		if err != nil {
			return err
		}
		leaders = append(leaders, l)
		distinct[i] = target{fence: name, token: l.Token()}
	}
	hl, err := b.campaign(ctx, "bench-hot", 30*time.Second)
	if err != nil {
		return err
	}
	leaders = append(leaders, hl)
	hot := []target{{fence: "bench-hot", token: hl.Token()}}

	type combo struct {
		scenario string
		clients  int
		targets  []target
	}
	var combos []combo
	for _, n := range b.cfg.clients {
		combos = append(combos, combo{"distinct", n, distinct[:n]})
	}
	for _, n := range b.cfg.hotClients {
		combos = append(combos, combo{"hot", n, hot})
	}
	var paths []string
	for _, p := range allPaths {
		// pg-bouncer-fenced and redis-twemproxy-fenced tell the proxies
		// apart on the same work; --quick leaves them out unless named.
		if (p == pgBouncerFenced || p == redisTwemproxyFenced) && b.cfg.quick && b.cfg.paths == "" {
			continue
		}
		if b.cfg.wantsPath(p) {
			paths = append(paths, p)
		}
	}
	for _, c := range combos {
		samples := make(map[string]*sample, len(paths))
		for rep := range b.cfg.reps {
			order := slices.Clone(paths)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for _, p := range order {
				o := loadOpts{warmup: b.cfg.warmup, duration: b.cfg.duration, backendPID: b.env.backendPID(p), gatePID: b.env.proxyPID(p)}
				if viaGateway(p) {
					g := b.env.gateFor(p)
					if b.cfg.profileDir != "" && rep == 0 && c.scenario == "distinct" && c.clients == slices.Max(b.cfg.clients) {
						o.profile = filepath.Join(b.cfg.profileDir, fmt.Sprintf("%s-c%d.pprof", p, c.clients))
						o.pprofAddr = g.pprofAddr
					}
				}
				s, err := b.measure(ctx, p, c.clients, c.targets, false, o)
				if err != nil {
					return err
				}
				if samples[p] == nil {
					samples[p] = &sample{}
				}
				samples[p].merge(s)
			}
		}
		for _, p := range paths {
			r := summarise(c.scenario, p, c.clients, *samples[p], b.env.proxyPID(p) != 0)
			b.emit(r)
			logf("%-9s %3d clients %-22s %7.0f ops/s  p50 %7.1f µs  p99 %8.1f µs%s", c.scenario, c.clients, p, r.OpsPerSec, r.P50us, r.P99us, errNote(r))
		}
	}
	return nil
}

func errNote(r result) string {
	if r.Errors == 0 {
		return ""
	}
	return fmt.Sprintf("  %d errors (%s)", r.Errors, r.Note)
}

// measure runs one load of path.
func (b *bench) measure(ctx context.Context, path string, clients int, targets []target, stale bool, o loadOpts) (sample, error) {
	if err := b.env.truncate(ctx); err != nil {
		return sample{}, err
	}
	cs, err := b.env.buildOps(ctx, b.cfg, path, clients, targets, stale)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", path, err)
	}
	defer cs.close()
	return runLoad(ctx, cs.ops, o)
}

// backendPID is the server process path writes to.
func (e *env) backendPID(path string) int {
	if strings.HasPrefix(path, "pg-") {
		return e.pg.PID()
	}
	return e.rd.PID()
}

// write sends one fenced write through fencegate's gRPC API.
func (b *bench) write(ctx context.Context, backend, fence string, token int64) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "fencing-token", strconv.FormatInt(token, 10))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if backend == "pg" {
		_, err := b.gw.Exec(ctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{
			Sql:    insertSQL,
			Params: []*structpb.Value{structpb.NewStringValue(fence), structpb.NewNumberValue(float64(token))},
		}}})
		return err
	}
	cmd, _ := structpb.NewList([]any{"SET", redisKey(fence), "7"})
	_, err := b.gw.Redis(ctx, &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{cmd}})
	return err
}

// runStale measures refusals of a stale token (the fast path), and checks
// with the backends' own counters that none of them reached a backend.
func (b *bench) runStale(ctx context.Context) error {
	const fence = "bench-stale"
	old, err := b.campaign(ctx, fence, 30*time.Second)
	if err != nil {
		return err
	}
	for _, be := range []string{"pg", "redis"} {
		if err := b.write(ctx, be, fence, old.Token()); err != nil {
			return fmt.Errorf("write with the first leader's token: %w", err)
		}
	}
	next := make(chan *election.Leadership, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := b.campaign(ctx, fence, 30*time.Second)
		if err != nil {
			errc <- err
			return
		}
		next <- l
	}()
	if err := old.Resign(ctx); err != nil {
		return err
	}
	var cur *election.Leadership
	select {
	case cur = <-next:
	case err := <-errc:
		return err
	}
	defer func() { _ = cur.Resign(context.WithoutCancel(ctx)) }()
	for _, be := range []string{"pg", "redis"} {
		if err := b.write(ctx, be, fence, cur.Token()); err != nil {
			return fmt.Errorf("write with the second leader's token: %w", err)
		}
	}

	// pg-wire and redis-resp also at 1 client: a refusal's latency next to
	// an accepted write's shows that no round trip to the backend is in it.
	clients := []int{1, 16}
	if !b.cfg.quick {
		clients = []int{1, 16, 64}
	}
	total := staleCheck{ok: true}
	for _, n := range clients {
		for _, p := range []string{pgWire, pgGRPC, pgHTTP, redisRESP, redisGRPC, redisHTTP} {
			if !b.cfg.wantsPath(p) || n == 1 && p != pgWire && p != redisRESP {
				continue
			}
			o := loadOpts{warmup: b.cfg.warmup, duration: b.cfg.duration, gatePID: b.env.gate.pid(), backendPID: b.env.backendPID(p)}
			if b.cfg.profileDir != "" && n == clients[len(clients)-1] {
				o.profile = filepath.Join(b.cfg.profileDir, fmt.Sprintf("stale-%s-c%d.pprof", p, n))
				o.pprofAddr = b.env.gate.pprofAddr
			}
			s, seen, err := b.measureStale(ctx, p, n, []target{{fence: fence, token: old.Token()}}, o)
			if err != nil {
				return err
			}
			total.add(seen)
			r := summarise("stale", p, n, s, true)
			b.emit(r)
			logf("stale     %3d clients %-22s %7.0f refusals/s  p50 %7.1f µs  p99 %8.1f µs%s", n, p, r.OpsPerSec, r.P50us, r.P99us, errNote(r))
		}
	}
	b.rep.staleBackend = total
	logf("backend requests during the stale loads: %s", b.rep.staleBackend)
	return nil
}

// measureStale runs one stale load of path and returns what the backends
// saw during it. The clients connect first (a pg-wire connection's start
// prepares the fence check, and its clients prepare their INSERT): what
// is counted is the load alone.
func (b *bench) measureStale(ctx context.Context, path string, clients int, targets []target, o loadOpts) (sample, staleCheck, error) {
	cs, err := b.env.buildOps(ctx, b.cfg, path, clients, targets, true)
	if err != nil {
		return sample{}, staleCheck{}, fmt.Errorf("%s: %w", path, err)
	}
	defer cs.close()
	before, err := b.env.backendCounters(ctx)
	if err != nil {
		return sample{}, staleCheck{}, err
	}
	s, err := runLoad(ctx, cs.ops, o)
	if err != nil {
		return s, staleCheck{}, err
	}
	after, err := b.env.backendCounters(ctx)
	if err != nil {
		return s, staleCheck{}, err
	}
	if err := b.env.countPGQueriesSince(ctx, before.pgNow, &after); err != nil {
		return s, staleCheck{}, err
	}
	return s, before.diff(after), nil
}

// counters are the backends' own request counts.
type counters struct {
	pgNow          time.Time // PostgreSQL's clock when read
	pgQueriesSince int64     // fencegate sessions whose last query started since the previous read
	redisScripts   int64     // EVALSHA + EVAL calls
	redisCmds      int64     // total_commands_processed
}

func (e *env) backendCounters(ctx context.Context) (counters, error) {
	var c counters
	if err := e.admin.QueryRow(ctx, "SELECT now()").Scan(&c.pgNow); err != nil {
		return c, err
	}
	info, err := e.radmin.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			c.redisCmds, _ = strconv.ParseInt(v, 10, 64)
		}
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if v, ok := strings.CutPrefix(line, cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
				n, _ := strconv.ParseInt(calls, 10, 64)
				c.redisScripts += n
			}
		}
	}
	return c, nil
}

// staleCheck is what the backends saw during the stale loads.
type staleCheck struct {
	redisScripts, redisOther int64
	pgQueries                int64
	ok                       bool
}

func (s staleCheck) String() string {
	return fmt.Sprintf("Redis EVALSHA/EVAL calls +%d (other commands +%d: the bench's own INFO), PostgreSQL sessions of fencegate's pool or of its listener that ran a query %d",
		s.redisScripts, s.redisOther, s.pgQueries)
}

func (s *staleCheck) add(o staleCheck) {
	s.redisScripts += o.redisScripts
	s.redisOther += o.redisOther
	s.pgQueries += o.pgQueries
	s.ok = s.ok && o.ok
}

func (before counters) diff(after counters) staleCheck {
	return staleCheck{
		redisScripts: after.redisScripts - before.redisScripts,
		redisOther:   after.redisCmds - before.redisCmds - (after.redisScripts - before.redisScripts),
		pgQueries:    after.pgQueriesSince,
		ok:           after.redisScripts == before.redisScripts && after.pgQueriesSince == 0,
	}
}

// countPGQueriesSince fills c.pgQueriesSince: sessions of fencegate's
// pool, or server connections of its listener's pg-wire clients, that
// started a query after since (pg_stat_activity is live, not a delayed
// statistic; an extended-protocol Bind or Execute sets query_start too).
// fencegate's readiness check pings PostgreSQL every few seconds ("--
// ping", an empty query) through its pool: that is no request of a
// client's, and is not counted.
func (e *env) countPGQueriesSince(ctx context.Context, since time.Time, c *counters) error {
	return e.admin.QueryRow(ctx,
		"SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('fencegate', 'fencebench-"+pgWire+"') AND query_start >= $1 AND query <> '-- ping'", since).
		Scan(&c.pgQueriesSince)
}

// runPropagation measures how long after an etcd change fencegate refuses
// the ended term: a probe writes back to back with the leader's token; the
// leader's key is deleted; the time is from the delete's answer to the end
// of the first refused write.
func (b *bench) runPropagation(ctx context.Context, scenario string, trials int) error {
	const fence = "bench-prop"
	lats := make([]int64, 0, trials)
	for range trials {
		l, err := b.campaign(ctx, fence, 30*time.Second)
		if err != nil {
			return err
		}
		refused := make(chan time.Time, 1)
		accepted := make(chan struct{}, 1)
		pctx, cancel := context.WithCancel(ctx)
		probeErr := make(chan error, 1)
		go func() {
			for pctx.Err() == nil {
				err := b.write(pctx, "redis", fence, l.Token())
				now := time.Now()
				switch status.Code(err) {
				case codes.OK:
					select {
					case accepted <- struct{}{}:
					default:
					}
				case codes.Aborted:
					refused <- now
					return
				default:
					if pctx.Err() == nil {
						probeErr <- err
					}
					return
				}
			}
		}()
		<-accepted
		time.Sleep(time.Duration(5+rand.IntN(15)) * time.Millisecond)
		if _, err := b.env.cli.Delete(ctx, l.Key()); err != nil {
			cancel()
			return err
		}
		t0 := time.Now()
		var t1 time.Time
		select {
		case t1 = <-refused:
		case err := <-probeErr:
			cancel()
			return fmt.Errorf("probe: %w", err)
		case <-time.After(10 * time.Second):
			cancel()
			return errors.New("the ended term was still accepted 10 s after its key was deleted")
		}
		cancel()
		_ = l.Resign(ctx)
		lats = append(lats, int64(max(0, t1.Sub(t0))))
	}
	r := latencyResult(scenario, redisGRPC, lats)
	b.emit(r)
	logf("%s: %d trials, p50 %.1f µs, p99 %.1f µs", scenario, trials, r.P50us, r.P99us)
	return nil
}

// latencyResult is a result row for trials measured as one latency each.
func latencyResult(scenario, path string, lats []int64) result {
	slices.Sort(lats)
	return result{
		Scenario: scenario, Path: path, Clients: 1,
		P50us:  us(percentile(lats, 0.50)),
		P99us:  us(percentile(lats, 0.99)),
		MaxUs:  us(time.Duration(slices.Max(lats))),
		Trials: len(lats),
	}
}

// runFailover measures the time from a leader's end (resign, or SIGKILL
// and lease expiry) to the new leader's first accepted write.
func (b *bench) runFailover(ctx context.Context) error {
	// Resign: the leader is in this process and resigns.
	const rfence = "bench-fo-resign"
	var lats, resignCalls []int64
	for range b.cfg.resignTrials {
		l, err := b.campaign(ctx, rfence, b.cfg.ttl)
		if err != nil {
			return err
		}
		if err := b.write(ctx, "redis", rfence, l.Token()); err != nil {
			return err
		}
		standby, err := b.standby(ctx, rfence)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := l.Resign(ctx); err != nil {
			return err
		}
		resignCalls = append(resignCalls, int64(time.Since(t0)))
		d, err := b.firstWrite(ctx, standby, rfence, t0)
		if err != nil {
			return err
		}
		lats = append(lats, int64(d))
	}
	r := latencyResult("failover-resign", redisGRPC, lats)
	slices.Sort(resignCalls)
	r.Note = fmt.Sprintf("of which the Resign call (delete key, revoke lease): p50 %.1f ms, p99 %.1f ms",
		us(percentile(resignCalls, 0.5))/1000, us(percentile(resignCalls, 0.99))/1000)
	b.emit(r)
	logf("failover after resign: %d trials, p50 %.1f ms, p99 %.1f ms", len(lats), r.P50us/1000, r.P99us/1000)

	// SIGKILL: the leader is a child process; its lease must expire.
	const kfence = "bench-fo-kill"
	lats = lats[:0]
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for range b.cfg.killTrials {
		child, token, err := b.startLeaderChild(ctx, exe, kfence)
		if err != nil {
			return err
		}
		if err := b.write(ctx, "redis", kfence, token); err != nil {
			_ = child.Process.Kill()
			_ = child.Wait()
			return err
		}
		standby, err := b.standby(ctx, kfence)
		if err != nil {
			_ = child.Process.Kill()
			_ = child.Wait()
			return err
		}
		t0 := time.Now()
		_ = child.Process.Signal(syscall.SIGKILL)
		d, err := b.firstWrite(ctx, standby, kfence, t0)
		_ = child.Wait()
		if err != nil {
			return err
		}
		lats = append(lats, int64(d))
	}
	r = latencyResult("failover-kill", redisGRPC, lats)
	r.Note = fmt.Sprintf("lease TTL %v", b.cfg.ttl)
	b.emit(r)
	logf("failover after SIGKILL (TTL %v): %d trials, p50 %.1f ms, p99 %.1f ms", b.cfg.ttl, len(lats), r.P50us/1000, r.P99us/1000)
	return nil
}

// standby campaigns in the background once the election has a leader and
// returns when its candidate key is in etcd.
func (b *bench) standby(ctx context.Context, fence string) (<-chan campaignResult, error) {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := b.campaign(ctx, fence, b.cfg.ttl)
		ch <- campaignResult{l, err}
	}()
	pfx := electionPrefix + "/" + fence + "/"
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := b.env.cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, err
		}
		if resp.Count >= 2 {
			// A real standby has been waiting for a while. etcd delivers
			// events to a watch opened at a past revision only from its
			// next sync of unsynced watchers (every 100 ms), so ending the
			// leadership right away would measure that instead.
			time.Sleep(standbySettle)
			return ch, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("standby's key did not appear")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// standbySettle is how long a standby waits before the leader is ended.
const standbySettle = 250 * time.Millisecond

type campaignResult struct {
	l   *election.Leadership
	err error
}

// firstWrite waits for the standby to be elected, writes with its token
// until a write is accepted, resigns it and returns the time since t0.
func (b *bench) firstWrite(ctx context.Context, standby <-chan campaignResult, fence string, t0 time.Time) (time.Duration, error) {
	var cr campaignResult
	select {
	case cr = <-standby:
	case <-time.After(30 * time.Second):
		return 0, errors.New("the standby was not elected within 30 s")
	}
	if cr.err != nil {
		return 0, cr.err
	}
	defer func() { _ = cr.l.Resign(context.WithoutCancel(ctx)) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := b.write(ctx, "redis", fence, cr.l.Token())
		if err == nil {
			return time.Since(t0), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the new leader's writes were refused for 10 s: %w", err)
		}
	}
}

// leaderCommand is the hidden subcommand a failover trial's leader runs as.
const leaderCommand = "__leader"

func (b *bench) startLeaderChild(ctx context.Context, exe, fence string) (*exec.Cmd, int64, error) {
	cmd := exec.CommandContext(ctx, exe, leaderCommand,
		"--etcd="+strings.Join(b.env.etcd.Endpoints(), ","), "--election="+fence, "--ttl="+b.cfg.ttl.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, 0, fmt.Errorf("leader child: %w", err)
	}
	token, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "token ")), 10, 64)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, 0, fmt.Errorf("leader child said %q", line)
	}
	return cmd, token, nil
}

// runLeaderChild campaigns, prints "token <n>" and holds the leadership
// until killed.
func runLeaderChild(args []string) int {
	fs := flag.NewFlagSet(leaderCommand, flag.ContinueOnError)
	endpoints := fs.String("etcd", "", "")
	name := fs.String("election", "", "")
	ttl := fs.Duration("ttl", 2*time.Second, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	l, err := election.Campaign(ctx, cli, election.CampaignConfig{Election: *name, Value: "fencebench-child", TTL: *ttl})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		return 1
	}
	fmt.Printf("token %d\n", l.Token())
	select {} // until SIGKILL
}

// runManyElections adds cfg.elections elections (one candidate each, one
// lease for all), waits for fencegate to know them, then measures RSS and
// term propagation again.
func (b *bench) runManyElections(ctx context.Context) error {
	n := b.cfg.elections
	logf("adding %d elections", n)
	lease, err := b.env.cli.Grant(ctx, 3600)
	if err != nil {
		return err
	}
	defer func() { _, _ = b.env.cli.Revoke(context.WithoutCancel(ctx), lease.ID) }()
	const perTxn = 100
	for i := 0; i < n; i += perTxn {
		var ops []clientv3.Op
		for j := i; j < min(n, i+perTxn); j++ {
			key := fmt.Sprintf("%s/bench-many-%05d/%x", electionPrefix, j, lease.ID)
			ops = append(ops, clientv3.OpPut(key, "bulk", clientv3.WithLease(lease.ID)))
		}
		if _, err := b.env.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
	}
	last := fmt.Sprintf("bench-many-%05d", n-1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		f, err := b.gw.GetFence(ctx, &fencegatev1.GetFenceRequest{Fence: last})
		if err == nil && f.GetHasLeader() {
			break
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("fencegate did not learn election %s within 60 s (%w)", last, err)
			}
			return fmt.Errorf("fencegate did not learn election %s within 60 s", last)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rss, hwm, err := memStatus(b.env.gate.pid())
	if err != nil {
		return err
	}
	rssR, hwmR := round1(rss), round1(hwm)
	b.emit(result{Scenario: fmt.Sprintf("elections-%d", n), Path: "fencegate", RSSMiB: &rssR, PeakRSSMiB: &hwmR})
	logf("%d elections watched: fencegate RSS %.1f MiB (peak since start %.1f MiB)", n, rss, hwm)
	return b.runPropagation(ctx, fmt.Sprintf("term-propagation-%d-elections", n), b.cfg.propTrials)
}
