package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/cmd/internal/flagerr"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/freeport"
	"github.com/fencegate/fencegate/election/netfault"
	pgthrow "github.com/fencegate/fencegate/proxy/postgres/throwaway"
	rdthrow "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

type campaignConfig struct {
	Backend      string
	Protocol     string
	Source       string
	Mode         string
	Seed         uint64
	Duration     time.Duration
	Workers      int
	Fence        string
	TTL          time.Duration
	FencegateBin string
	Dir          string
	Keep         bool
	GapMin       time.Duration
	GapMax       time.Duration
	Interval     time.Duration
	Concurrency  int
	Timeout      time.Duration
	RecklessP    float64
	HTTPP        float64
	HostileP     float64
	PrintMax     int
	Faults       []string
	Quiet        bool
	Secure       bool
	GatewayArgs  string
}

// checkRanges returns what is wrong with a flag out of its range, or "":
// such a value would otherwise start a whole cluster before failing, or
// run a campaign that proves nothing.
func (cfg *campaignConfig) checkRanges() string {
	for _, r := range []struct {
		ok   bool
		flag string
		got  any
		want string
	}{
		{cfg.Duration > 0, "--duration", cfg.Duration, "a positive duration"},
		{cfg.TTL >= time.Second && cfg.TTL%time.Second == 0, "--ttl", cfg.TTL, "a whole number of seconds, at least 1s"},
		{cfg.GapMin >= 0, "--gap-min", cfg.GapMin, "a duration from 0"},
		{cfg.GapMax >= 0, "--gap-max", cfg.GapMax, "a duration from 0"},
		{cfg.Interval >= 0, "--interval", cfg.Interval, "a duration from 0"},
		{cfg.Timeout > 0, "--timeout", cfg.Timeout, "a positive duration"},
		{cfg.Concurrency >= 1, "--concurrency", cfg.Concurrency, "at least 1"},
		{cfg.RecklessP >= 0 && cfg.RecklessP <= 1, "--reckless", cfg.RecklessP, "a probability from 0 to 1"},
		{cfg.PrintMax >= 0, "--print-violations", cfg.PrintMax, "a count from 0"},
	} {
		if !r.ok {
			return fmt.Sprintf("%s=%v: want %s", r.flag, r.got, r.want)
		}
	}
	return ""
}

func runCampaign(ctx context.Context, args []string) int {
	var cfg campaignConfig
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&cfg.Backend, "backend", "postgres", "postgres or redis")
	fs.StringVar(&cfg.Protocol, "protocol", protoGRPCHTTP, "how the workers write: grpc, http, grpc+http (each write over one of them, --http the chance of HTTP; alias mixed), pgwire (pgx through fencegate's PostgreSQL listener; postgres only) or resp (go-redis through fencegate's RESP listener; redis only)")
	fs.StringVar(&cfg.Source, "source", election.SourceEtcd, "the election the workers campaign in, and fencegate learns terms from: "+sourceNames())
	fs.StringVar(&cfg.Mode, "mode", "fenced", "fenced (workers write through fencegate) or control (straight to the backend)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the fault schedule and the workers; 0 picks one (printed)")
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "how long faults are injected")
	fs.IntVar(&cfg.Workers, "workers", 3, "worker processes campaigning for the fence")
	fs.StringVar(&cfg.Fence, "fence", "chaos", "fence and election name")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "workers' lease TTL (whole seconds; etcd grants at least 2s with the members' timing)")
	fs.StringVar(&cfg.FencegateBin, "fencegate-bin", "", "fencegate binary (default: fencegate beside fencechaos, else bin/fencegate)")
	fs.StringVar(&cfg.Dir, "dir", "", "working directory for data, logs and histories (default: a new temporary one)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the working directory (it is always kept when a fenced run fails)")
	fs.DurationVar(&cfg.GapMin, "gap-min", 2*time.Second, "shortest quiet time between faults")
	fs.DurationVar(&cfg.GapMax, "gap-max", 4*time.Second, "longest quiet time between faults")
	fs.DurationVar(&cfg.Interval, "interval", 5*time.Millisecond, "workers' pause between writes")
	fs.IntVar(&cfg.Concurrency, "concurrency", 6, "writes each leading worker keeps in flight at once (so fencegate batches them with each other and with zombies')")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "workers' request timeout (then the outcome is unknown)")
	fs.Float64Var(&cfg.RecklessP, "reckless", 0.6, "probability that a worker leads a term recklessly (keeps writing after it is over)")
	fs.Float64Var(&cfg.HTTPP, "http", 0.5, "probability that a fenced write goes over HTTP/JSON rather than gRPC")
	fs.Float64Var(&cfg.HostileP, "hostile", 0, "probability that a leading worker sends an attack, with its own valid token, before a write (fenced mode only; see docs/SAFETY.md)")
	fs.IntVar(&cfg.PrintMax, "print-violations", 20, "violations printed in full (all are counted, and summed up by kind)")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "print only violations and the result line")
	fs.BoolVar(&cfg.Secure, "secure", true, "gateways serve TLS, require client certificates and enforce a policy (SQL as a writer role on PostgreSQL); every client presents a certificate of the campaign's CA (secure.go)")
	fs.StringVar(&cfg.GatewayArgs, "gateway-args", "", "extra space-separated flags for every fencegate serve, after the campaign's own (a later flag wins: --gateway-args=--policy-mode=shadow removes the policy's refusals)")
	faults := fs.String("faults", "", "comma-separated fault kinds to inject (default all): "+strings.Join(faultNames(), ", "))
	// A parse error is one line, not the error and then every flag.
	fs.SetOutput(io.Discard)
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(os.Stdout)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "fencechaos run: %s\nRun 'fencechaos run --help' for usage.\n", flagerr.Explain(err, fs))
		return 2
	}
	if msg := cfg.checkRanges(); msg != "" {
		fmt.Fprintf(os.Stderr, "fencechaos run: %s\nRun 'fencechaos run --help' for usage.\n", msg)
		return 2
	}
	if fs.NArg() > 0 {
		// A stray word must not start a whole campaign.
		fmt.Fprintf(os.Stderr, "fencechaos: unexpected argument %q: fencechaos run takes flags only (fencechaos run --help lists them)\n", fs.Arg(0))
		return 2
	}
	if cfg.Backend != "postgres" && cfg.Backend != "redis" {
		fmt.Fprintf(os.Stderr, "fencechaos: --backend %q: want postgres or redis\n", cfg.Backend)
		return 2
	}
	if err := checkProtocol(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fencechaos: %v\n", err)
		return 2
	}
	if cfg.Mode != "fenced" && cfg.Mode != "control" {
		fmt.Fprintf(os.Stderr, "fencechaos: --mode %q: want fenced or control\n", cfg.Mode)
		return 2
	}
	if cfg.HostileP < 0 || cfg.HostileP > 1 {
		fmt.Fprintf(os.Stderr, "fencechaos: --hostile %v: want a probability from 0 to 1\n", cfg.HostileP)
		return 2
	}
	if cfg.Workers < 3 {
		fmt.Fprintf(os.Stderr, "fencechaos: --workers %d: want at least 3\n", cfg.Workers)
		return 2
	}
	cfg.Faults = splitList(*faults)
	for _, f := range cfg.Faults {
		if !slices.Contains(faultNames(), f) {
			fmt.Fprintf(os.Stderr, "fencechaos: --faults: unknown fault %q (want %s)\n", f, strings.Join(faultNames(), ", "))
			return 2
		}
	}
	if cfg.GapMax < cfg.GapMin {
		cfg.GapMax = cfg.GapMin
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencechaos: %v\n", err)
		return 1
	}
	if cfg.FencegateBin == "" {
		cfg.FencegateBin = filepath.Join(filepath.Dir(self), "fencegate")
		if _, err := os.Stat(cfg.FencegateBin); err != nil {
			cfg.FencegateBin = "bin/fencegate"
		}
	}
	if abs, err := filepath.Abs(cfg.FencegateBin); err == nil {
		cfg.FencegateBin = abs
	}
	if _, err := os.Stat(cfg.FencegateBin); err != nil {
		fmt.Fprintf(os.Stderr, "fencechaos: fencegate binary: %v (make build, or --fencegate-bin)\n", err)
		return 1
	}

	src, err := lookupSource(cfg.Source)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencechaos: %v\n", err)
		return 2
	}

	c := &campaign{cfg: cfg, self: self, rng: rand.New(rand.NewPCG(cfg.Seed, 0xfe4ce)), held: map[*child]bool{}, source: src}
	for _, f := range cfg.Faults {
		if !slices.ContainsFunc(c.faults(), func(g fault) bool { return g.name == f }) {
			fmt.Fprintf(os.Stderr, "fencechaos: --faults: %s is not a fault of --source=%s\n", f, cfg.Source)
			return 2
		}
	}
	c.logf("seed=%d backend=%s protocol=%s source=%s mode=%s duration=%s hostile=%v secure=%v fencegate=%s", cfg.Seed, cfg.Backend, cfg.Protocol, cfg.Source, cfg.Mode, cfg.Duration, c.hostile(), cfg.Secure, cfg.FencegateBin)
	res, err := c.run(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencechaos: %v\n", err)
		if c.dir != "" {
			fmt.Fprintf(os.Stderr, "fencechaos: logs kept in %s\n", c.dir)
		}
		return 1
	}
	fmt.Println(res.line(cfg))
	switch {
	case cfg.Mode == "fenced" && res.violations > 0:
		fmt.Fprintf(os.Stderr, "fencechaos: FAIL: %d violations with fencegate (seed %d); logs kept in %s\n", res.violations, cfg.Seed, c.dir)
		return 1
	case cfg.Mode == "control" && res.violations == 0:
		fmt.Fprintf(os.Stderr, "fencechaos: FAIL: the control run found no violation: the campaign is too weak (seed %d)\n", cfg.Seed)
		return 1
	}
	return 0
}

// result is what one run found.
type result struct {
	elapsed       time.Duration
	counts        Counts
	faults        int
	leaderChanges int
	violations    int
}

func (r result) line(cfg campaignConfig) string {
	return fmt.Sprintf("fencechaos backend=%s protocol=%s source=%s mode=%s seed=%d duration=%d ops=%d acked=%d refused=%d unknown=%d faults=%d leader_changes=%d zombie_writes_attempted=%d violations=%d hostile_attempts=%d hostile_accepted=%d",
		cfg.Backend, cfg.Protocol, cfg.Source, cfg.Mode, cfg.Seed, int(r.elapsed.Round(time.Second)/time.Second),
		r.counts.Ops, r.counts.Acked, r.counts.Refused, r.counts.Unknown,
		r.faults, r.leaderChanges, r.counts.Zombie, r.violations,
		r.counts.Hostile, r.counts.HostileAccepted)
}

// campaign is one run: the cluster, the workers and the fault schedule.
type campaign struct {
	cfg  campaignConfig
	self string
	rng  *rand.Rand
	dir  string

	mu       sync.Mutex // guards the children's desired state below
	etcd     []*child
	etcdURLs []string
	gateways []*gateway
	workers  []*workerSlot

	cli *clientv3.Client
	// source is the election the workers campaign in (--source).
	source chaosSource
	pg     *pgthrow.Server
	// pgRuntimeDSN is the DSN the gateways serve PostgreSQL as.
	pgRuntimeDSN string
	// pgLoginDSN is the pgwire workers' own login, straight to the
	// database (--protocol=pgwire).
	pgLoginDSN string
	rd         *rdthrow.Server
	rdc        *goredis.Client

	// creds are the certificates and policy of --secure; nil without.
	creds *pki
	// hc is the campaign's own HTTP client toward the gateways.
	hc *http.Client

	held      map[*child]bool // taken down by a fault: not to be restarted by supervise
	surprises []string        // processes that exited without a fault
}

type gateway struct {
	*child
	grpcAddr, httpAddr string
	// pgAddr is the PostgreSQL listener's (--pg-listen-addr), with
	// --protocol=pgwire; empty otherwise.
	pgAddr string
	// respAddr is the RESP listener's (--redis-listen-addr), with
	// --protocol=resp; empty otherwise.
	respAddr string
	// backend is this replica's own path to PostgreSQL or Redis, so one
	// replica's link can be stalled while the other's works.
	backend *netfault.Proxy
}

type workerSlot struct {
	idx     int
	inc     int
	proc    *child
	proxies []*netfault.Proxy
	// pgTerm is the slot's own path to PostgreSQL with
	// --source=postgres-term (one of proxies); nil otherwise.
	pgTerm *netfault.Proxy
}

func (w *workerSlot) name() string { return fmt.Sprintf("w%d.%d", w.idx, w.inc) }

// hostile reports whether the workers attack: only through fencegate. In
// control mode an attack would go straight to the backend as its
// superuser, which would test PostgreSQL's or Redis's defences, not
// fencegate's, and wreck the ledger the control check needs.
func (c *campaign) hostile() bool { return c.cfg.Mode == "fenced" && c.cfg.HostileP > 0 }

// otherFence is the fence the attacks aim at besides their own. The
// campaign gives it one write of its own at the start, so its mark is
// known and must stay.
func (c *campaign) otherFence() string { return c.cfg.Fence + "-other" }

func (c *campaign) logf(format string, args ...any) {
	if c.cfg.Quiet {
		return
	}
	fmt.Printf("%s fencechaos: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (c *campaign) run(ctx context.Context) (res result, err error) {
	if c.cfg.Dir != "" {
		c.dir, err = filepath.Abs(c.cfg.Dir)
		if err == nil {
			err = os.MkdirAll(c.dir, 0o755)
		}
	} else {
		c.dir, err = os.MkdirTemp("", "fencechaos-")
	}
	if err != nil {
		return res, err
	}
	keep := c.cfg.Keep
	defer func() {
		c.teardown()
		if err != nil || (c.cfg.Mode == "fenced" && res.violations > 0) {
			keep = true
		}
		if !keep {
			os.RemoveAll(c.dir)
		} else if err == nil {
			c.logf("working directory kept: %s", c.dir)
		}
	}()
	for _, d := range []string{"logs", "hist", "etcd"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return res, err
		}
	}
	c.hc = &http.Client{Timeout: time.Second}
	if c.cfg.Secure {
		if c.creds, err = c.newCredentials(filepath.Join(c.dir, "tls")); err != nil {
			return res, err
		}
		tc, err := c.creds.campaign.config()
		if err != nil {
			return res, err
		}
		c.hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	if err := c.startEtcd(ctx); err != nil {
		return res, err
	}
	if err := c.startBackend(ctx); err != nil {
		return res, err
	}
	if c.source.start != nil {
		if err := c.source.start(ctx, c); err != nil {
			return res, fmt.Errorf("%s: %w", c.cfg.Source, err)
		}
	}
	if err := c.startGateways(ctx); err != nil {
		return res, err
	}
	if c.hostile() {
		if err := c.writeOtherFence(ctx); err != nil {
			return res, fmt.Errorf("the attacks' other fence: %w", err)
		}
	}
	if err := c.startWorkers(); err != nil {
		return res, err
	}
	if err := c.waitLeader(ctx, 20*time.Second); err != nil {
		return res, fmt.Errorf("no worker became leader: %w", err)
	}
	c.logf("cluster up in %s; injecting faults for %s", c.dir, c.cfg.Duration)

	start := time.Now()
	sctx, stopSupervisor := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() { defer swg.Done(); c.supervise(sctx) }()
	res.faults, err = c.injectFaults(ctx, start.Add(c.cfg.Duration))
	res.elapsed = time.Since(start)
	stopSupervisor()
	swg.Wait()
	if err != nil {
		return res, err
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	c.logf("faults over (%d injected); stopping workers and gateways", res.faults)
	c.quiesce()

	st, err := c.readBackend(ctx)
	if err != nil {
		return res, fmt.Errorf("read the backend: %w", err)
	}
	hist, err := readHistories(filepath.Join(c.dir, "hist"))
	if err != nil {
		return res, fmt.Errorf("read histories: %w", err)
	}
	res.counts = hist.Counts()
	res.leaderChanges = max(hist.Elections[c.cfg.Fence]-1, 0)
	stored := st.stored[c.cfg.Fence]
	vs := Check(c.cfg.Fence, stored, hist)
	if c.cfg.Mode == "fenced" {
		// Only fencegate keeps marks; control mode has none to check.
		if c.hostile() {
			vs = append(vs, Check(c.otherFence(), st.stored[c.otherFence()], hist)...)
		}
		vs = append(vs, CheckMarks(st.marks, st.stored, hist)...)
		vs = append(vs, CheckHostile(c.cfg.Fence, stored, hist)...)
		for _, s := range st.stray {
			vs = append(vs, Violation{Kind: KindStray, Fence: c.cfg.Fence, Msg: s})
		}
	}
	res.violations = len(vs)
	c.report(stored, hist, vs)
	return res, nil
}

// report prints the violations (the first PrintMax in full) and a summary.
func (c *campaign) report(stored []Record, hist *History, vs []Violation) {
	byKind := map[string]int{}
	for i, v := range vs {
		byKind[v.Kind]++
		if i < c.cfg.PrintMax {
			fmt.Println(v)
		}
	}
	if c.cfg.PrintMax > 0 && len(vs) > c.cfg.PrintMax {
		fmt.Printf("... and %d more violations\n", len(vs)-c.cfg.PrintMax)
	}
	var kinds []string
	for k, n := range byKind {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	zombieStored := 0
	for _, r := range stored {
		if op, ok := hist.Ops[r.ID()]; ok && op.Zombie {
			zombieStored++
		}
	}
	reasons := map[string]int{}
	for _, op := range hist.Ops {
		if op.Outcome == Refused && !op.hostile() {
			reasons[op.Reason]++
		}
	}
	var rs []string
	for k, n := range reasons {
		rs = append(rs, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(rs)
	if len(c.surprises) > 0 {
		fmt.Printf("fencechaos: processes that exited on their own: %s\n", strings.Join(c.surprises, "; "))
	}
	c.logf("stored=%d zombie_writes_stored=%d refusals: %s", len(stored), zombieStored, strings.Join(rs, " "))
	for _, l := range hostileSummary(hist) {
		c.logf("hostile %s", l)
	}
	if len(kinds) > 0 {
		fmt.Printf("fencechaos: violations by kind: %s\n", strings.Join(kinds, " "))
	}
}

// hostileSummary says, per attack, how often it was sent and what became
// of it: "advance-other: 61 sent, refused 60 (INVALID_REQUEST=59
// STALE_TOKEN=1), unknown 1, accepted 0".
func hostileSummary(h *History) []string {
	type tally struct {
		sent, refused, unknown, accepted int
		reasons                          map[string]int
	}
	byAttack := map[string]*tally{}
	for _, op := range h.Ops {
		if !op.hostile() || op.Part != 0 {
			continue
		}
		t := byAttack[op.Attack]
		if t == nil {
			t = &tally{reasons: map[string]int{}}
			byAttack[op.Attack] = t
		}
		t.sent++
		switch op.Outcome {
		case Acked:
			t.accepted++
		case Refused:
			t.refused++
			t.reasons[op.Reason]++
		default:
			t.unknown++
		}
	}
	var lines []string
	for name, t := range byAttack {
		var rs []string
		for r, n := range t.reasons {
			rs = append(rs, fmt.Sprintf("%s=%d", r, n))
		}
		sort.Strings(rs)
		refused := strconv.Itoa(t.refused)
		if len(rs) > 0 {
			refused += " (" + strings.Join(rs, " ") + ")"
		}
		lines = append(lines, fmt.Sprintf("%s: %d sent, refused %s, unknown %d, accepted %d",
			name, t.sent, refused, t.unknown, t.accepted))
	}
	sort.Strings(lines)
	return lines
}

// freePorts picks n distinct free loopback ports for the servers this
// campaign starts, below the kernel's ephemeral range: the many client
// connections of a campaign would otherwise take one now and then between
// the pick and the server's bind, and the server would exit with "address
// already in use" (as fencegate g1 once did in CI).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		p, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

func (c *campaign) startEtcd(ctx context.Context) error {
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	var cluster []string
	for i := range 3 {
		cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[3+i]))
	}
	for i := range 3 {
		name := fmt.Sprintf("m%d", i)
		clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[i])
		args := []string{
			"etcd-member", "--name", name,
			"--data-dir", filepath.Join(c.dir, "etcd", name),
			"--client-url", clientURL,
			"--peer-url", fmt.Sprintf("http://127.0.0.1:%d", ports[3+i]),
			"--initial-cluster", strings.Join(cluster, ","),
		}
		ch := &child{
			name: "etcd " + name, path: c.self, args: func() []string { return args },
			log: filepath.Join(c.dir, "logs", "etcd-"+name+".log"),
		}
		c.etcd = append(c.etcd, ch)
		c.etcdURLs = append(c.etcdURLs, clientURL)
		if err := ch.start(); err != nil {
			return err
		}
	}
	c.cli, err = clientv3.New(clientv3.Config{
		Endpoints:   c.etcdURLs,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.cli.Put(gctx, "/fencechaos/up", "1")
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("etcd cluster not up: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *campaign) startBackend(ctx context.Context) error {
	logf := func(string, ...any) {} // the servers' logs are noise here
	switch c.cfg.Backend {
	case "postgres":
		// Durable: fsync and synchronous commit on, so that a SIGKILL of
		// the server loses no acknowledged write.
		pg, err := pgthrow.Start(ctx, pgthrow.Options{Durable: true, Logf: logf})
		if err != nil {
			return err
		}
		c.pg = pg
		conn, err := pgx.Connect(ctx, pg.DSN())
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, ledgerDDL); err != nil {
			return err
		}
		if c.hostile() {
			for _, sql := range evilDDL {
				if _, err := conn.Exec(ctx, sql); err != nil {
					return fmt.Errorf("%s: %w", sql, err)
				}
			}
		}
		// The gateways serve as a role that is not a superuser, as in a
		// deployment; the workers' own checks and control writes use the
		// superuser.
		const login = "fencegate_chaos"
		if c.pgRuntimeDSN, err = pg.RuntimeRole(ctx, login); err != nil {
			return err
		}
		if c.cfg.Protocol == protoPgwire {
			if c.pgLoginDSN, err = createPgwireLogin(ctx, conn, pg); err != nil {
				return err
			}
		}
		if c.creds != nil {
			return grantWriter(ctx, conn, login)
		}
		return nil
	default:
		rd, err := rdthrow.Start(ctx, rdthrow.Options{Logf: logf})
		if err != nil {
			return err
		}
		c.rd = rd
		c.rdc = goredis.NewClient(&goredis.Options{Addr: rd.Addr(), MaxRetries: -1})
		return c.redisPersist(ctx)
	}
}

// redisPersist makes Redis save a snapshot when it shuts down (SIGTERM),
// which the throwaway server loads at its next start, so a restart keeps
// every acknowledged write. The throwaway server starts with no save
// points; set them after every start.
func (c *campaign) redisPersist(ctx context.Context) error {
	var err error
	for range 50 {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err = c.rdc.ConfigSet(cctx, "save", "3600 1").Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redis: CONFIG SET save: %w", err)
}

// backendAddr is the backend's own address.
func (c *campaign) backendAddr() string {
	if c.pg != nil {
		return fmt.Sprintf("127.0.0.1:%d", c.pg.Port())
	}
	return c.rd.Addr()
}

// backendArgs are the flags that point a replica at the backend through
// addr (its proxy).
func (c *campaign) backendArgs(addr string) []string {
	if c.pg != nil {
		return []string{"--postgres-dsn=" + strings.Replace(c.pgRuntimeDSN, c.backendAddr(), addr, 1)}
	}
	return []string{"--redis-addr=" + addr}
}

func (c *campaign) startGateways(ctx context.Context) error {
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	for i := range 2 {
		g := &gateway{grpcAddr: fmt.Sprintf("127.0.0.1:%d", ports[3*i]), httpAddr: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])}
		switch c.cfg.Protocol {
		case protoPgwire:
			g.pgAddr = fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])
		case protoRESP:
			g.respAddr = fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])
		}
		if g.backend, err = netfault.New(c.backendAddr()); err != nil {
			return err
		}
		c.gateways = append(c.gateways, g)
		args := append([]string{
			"serve",
			"--etcd-endpoints=" + strings.Join(c.etcdURLs, ","),
			"--grpc-addr=" + g.grpcAddr, "--http-addr=" + g.httpAddr,
		}, c.backendArgs(g.backend.Addr())...)
		args = append(args, c.source.gatewayArgs(c)...)
		if g.pgAddr != "" {
			args = append(args, "--pg-listen-addr="+g.pgAddr)
		}
		if g.respAddr != "" {
			args = append(args, "--redis-listen-addr="+g.respAddr)
		}
		if i == 0 {
			// One connection slot: concurrent writes through g0 share
			// round trips (fencegate's batches) nearly always; g1 keeps
			// the default pool, where they rarely do.
			args = append(args, "--postgres-max-conns=1", "--redis-pool-size=1")
		}
		args = append(append(args, c.secureArgs()...), strings.Fields(c.cfg.GatewayArgs)...)
		g.child = &child{
			name: fmt.Sprintf("fencegate g%d", i), path: c.cfg.FencegateBin,
			args: func() []string { return args }, log: filepath.Join(c.dir, "logs", fmt.Sprintf("fencegate-g%d.log", i)),
		}
		if err := g.start(); err != nil {
			return err
		}
	}
	for _, g := range c.gateways {
		if err := c.waitReady(ctx, g, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits for a replica's /readyz to answer 200.
func (c *campaign) waitReady(ctx context.Context, g *gateway, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := c.hc.Get(c.scheme() + "://" + g.httpAddr + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readyz: %s", resp.Status)
		}
		if !g.running() {
			return errors.New(g.exited(g.name))
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			if line := lastLine(g.log); line != "" {
				return fmt.Errorf("%s not ready: %w; it last logged %q (see %s)", g.name, err, line, g.log)
			}
			return fmt.Errorf("%s not ready: %w", g.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *campaign) startWorkers() error {
	var gws, httpGws, pgGws, respGws []string
	for _, g := range c.gateways {
		gws = append(gws, g.grpcAddr)
		httpGws = append(httpGws, g.httpAddr)
		if g.pgAddr != "" {
			pgGws = append(pgGws, g.pgAddr)
		}
		if g.respAddr != "" {
			respGws = append(respGws, g.respAddr)
		}
	}
	for i := range c.cfg.Workers {
		w := &workerSlot{idx: i}
		for _, u := range c.etcdURLs {
			p, err := netfault.New(strings.TrimPrefix(u, "http://"))
			if err != nil {
				return err
			}
			w.proxies = append(w.proxies, p)
		}
		var eps []string
		for _, p := range w.proxies {
			eps = append(eps, p.Addr())
		}
		w.proc = &child{
			name: fmt.Sprintf("worker w%d", i), path: c.self,
			log: filepath.Join(c.dir, "logs", fmt.Sprintf("worker-w%d.log", i)),
			args: func() []string {
				args := []string{
					"worker",
					"--id", w.name(), "--fence", c.cfg.Fence,
					"--backend", c.cfg.Backend, "--mode", c.cfg.Mode,
					"--etcd", strings.Join(eps, ","),
					"--gateways", strings.Join(gws, ","),
					"--http-gateways", strings.Join(httpGws, ","),
					"--http", strconv.FormatFloat(c.cfg.HTTPP, 'f', -1, 64),
					"--protocol", c.cfg.Protocol,
					"--history", filepath.Join(c.dir, "hist", w.name()+".jsonl"),
					"--ttl", c.cfg.TTL.String(),
					"--seed", strconv.FormatUint(c.cfg.Seed*1000+uint64(i)*100+uint64(w.inc), 10),
					"--reckless", strconv.FormatFloat(c.cfg.RecklessP, 'f', -1, 64),
					"--interval", c.cfg.Interval.String(),
					"--concurrency", strconv.Itoa(c.cfg.Concurrency),
					"--timeout", c.cfg.Timeout.String(),
					"--zombie-min", (c.cfg.TTL + time.Second).String(),
					"--zombie-max", (c.cfg.TTL + 3*time.Second).String(),
				}
				if addr, err := c.source.workerAddr(c, w); err != nil {
					c.logf("worker %s: %v", w.name(), err)
				} else if addr != "" {
					args = append(args, "--source-addr", addr)
				}
				args = append(args, "--source", c.cfg.Source)
				if c.hostile() {
					args = append(args, "--hostile", strconv.FormatFloat(c.cfg.HostileP, 'f', -1, 64), "--other-fence", c.otherFence())
				}
				if c.creds != nil {
					args = append(args, c.creds.worker.args("")...)
					if c.hostile() {
						args = append(args, c.creds.intruder.args("intruder-")...)
					}
				}
				if len(respGws) > 0 {
					args = append(args, "--resp-gateways", strings.Join(respGws, ","))
				}
				if c.pgLoginDSN != "" {
					args = append(args, "--pg-gateways", strings.Join(pgGws, ","), "--pg-login-dsn", c.pgLoginDSN)
				}
				if c.pg != nil {
					args = append(args, "--postgres-dsn", c.pg.DSN())
				} else {
					args = append(args, "--redis-addr", c.rd.Addr())
				}
				return args
			},
		}
		c.workers = append(c.workers, w)
		if err := w.proc.start(); err != nil {
			return err
		}
	}
	return nil
}

// restartWorker starts a new incarnation of a worker that is not running.
func (c *campaign) restartWorker(w *workerSlot) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.proc.running() {
		return nil
	}
	w.inc++
	delete(c.held, w.proc)
	return w.proc.start()
}

// supervise restarts processes that exited without a fault taking them
// down, and notes them: fencegate exiting on its own is a finding.
func (c *campaign) supervise(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		var deadWorkers []*workerSlot
		var dead []*child
		for _, w := range c.workers {
			if !c.held[w.proc] && !w.proc.running() {
				deadWorkers = append(deadWorkers, w)
			}
		}
		for _, e := range c.etcd {
			if !c.held[e] && !e.running() {
				dead = append(dead, e)
			}
		}
		for _, g := range c.gateways {
			if !c.held[g.child] && !g.running() {
				dead = append(dead, g.child)
			}
		}
		c.mu.Unlock()
		for _, w := range deadWorkers {
			c.surprise(w.proc.exited(w.name()))
			_ = c.restartWorker(w)
		}
		for _, ch := range dead {
			c.surprise(ch.exited(ch.name))
			_ = ch.start()
		}
	}
}

func (c *campaign) surprise(s string) {
	c.mu.Lock()
	c.surprises = append(c.surprises, s)
	c.mu.Unlock()
	c.logf("UNEXPECTED: %s", s)
}

// leader returns the worker slot whose current incarnation leads the
// fence's election, or nil.
func (c *campaign) leader(ctx context.Context) *workerSlot {
	name := c.source.leader(ctx, c)
	if name == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		if w.name() == name && w.proc.running() {
			return w
		}
	}
	return nil
}

func (c *campaign) waitLeader(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if w := c.leader(ctx); w != nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// quiesce ends the run: every process continued and reconnected, then
// workers and gateways stopped so no write is in flight when the stored
// data is read.
func (c *campaign) quiesce() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		for _, p := range w.proxies {
			p.Restore()
		}
		c.held[w.proc] = true
	}
	for _, g := range c.gateways {
		g.backend.Release()
		c.held[g.child] = true
	}
	var wg sync.WaitGroup
	for _, w := range c.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.proc.stop(5 * time.Second) }()
	}
	wg.Wait()
	for _, g := range c.gateways {
		wg.Add(1)
		go func() { defer wg.Done(); g.stop(10 * time.Second) }()
	}
	wg.Wait()
}

// teardown stops everything still running.
func (c *campaign) teardown() {
	for _, w := range c.workers {
		w.proc.kill()
		for _, p := range w.proxies {
			p.Close()
		}
	}
	for _, g := range c.gateways {
		g.kill()
		g.backend.Close()
	}
	if c.source.stop != nil {
		c.source.stop(c)
	}
	if c.rdc != nil {
		c.rdc.Close()
	}
	if c.hc != nil {
		c.hc.CloseIdleConnections()
	}
	if c.pg != nil {
		c.pg.Close()
	}
	if c.rd != nil {
		c.rd.Close()
	}
	if c.cli != nil {
		c.cli.Close()
	}
	for _, e := range c.etcd {
		e.stop(5 * time.Second)
	}
}
