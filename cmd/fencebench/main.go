// Command fencebench measures fencegate's write path against writing to
// PostgreSQL and Redis directly, on the same servers in the same run.
//
// It starts an embedded etcd (in-process), a throwaway PostgreSQL and Redis,
// and bin/fencegate serve as a separate process, so fencegate's own CPU and
// RSS can be read from /proc. Workers campaign with election.Campaign to
// hold real fencing tokens. Every load is closed-loop: N clients issue
// requests back to back for the duration, after a warm-up.
//
//	fencebench [--quick] [--json] [--markdown docs/BENCHMARKS.md] [flags]
//
// The table goes to stdout (and, with --markdown, between the fencebench
// markers of that file); --json adds one JSON object per measurement to
// stdout, each line starting with '{'. Progress goes to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/flagerr"
)

// config is fencebench's command line.
type config struct {
	quick        bool
	json         bool
	markdown     string
	fencegate    string
	clients      []int
	hotClients   []int
	duration     time.Duration
	warmup       time.Duration
	reps         int
	paths        string
	only         string
	killTrials   int
	resignTrials int
	propTrials   int
	elections    int
	ttl          time.Duration
	grpcPerConn  int
	profileDir   string
	etcdNoFsync  bool
	gateArgs     string
	pgConns      int
	backendUnix  bool
	gateProcs    int
	gateGodebug  string
	command      string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == leaderCommand {
		os.Exit(runLeaderChild(os.Args[2:]))
	}
	if len(os.Args) == 2 && os.Args[1] == "help" {
		os.Args[1] = "--help"
	}
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencebench: %v\nRun 'fencebench --help' for usage.\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fencebench:", err)
		os.Exit(1)
	}
}

func parseConfig(args []string) (config, error) {
	cfg := config{command: "fencebench " + strings.Join(args, " ")}
	fs := flag.NewFlagSet("fencebench", flag.ContinueOnError)
	fs.BoolVar(&cfg.quick, "quick", false, "short run (about 2 minutes): fewer clients, shorter loads, fewer trials")
	fs.BoolVar(&cfg.json, "json", false, "also print one JSON object per measurement to stdout")
	fs.StringVar(&cfg.markdown, "markdown", "", "write the report between the fencebench markers of this Markdown `file` (created if missing)")
	fs.StringVar(&cfg.fencegate, "fencegate", "bin/fencegate", "fencegate binary to run as the gateway under test")
	clients := fs.String("clients", "", "comma-separated client counts for the distinct-fences scenario (default 1,16,64)")
	hot := fs.String("hot-clients", "", "comma-separated client counts for the hot-fence scenario (default 16,64)")
	fs.DurationVar(&cfg.duration, "duration", 0, "measured time of each load (default 5s, quick 1s)")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "warm-up before each load (default 1s, quick 300ms)")
	fs.IntVar(&cfg.reps, "reps", 0, "repetitions of each load, paths interleaved (default 2, quick 1)")
	fs.StringVar(&cfg.paths, "paths", "", "comma-separated paths to measure (default all: "+strings.Join(allPaths, ",")+"; a -secure path goes through a second gateway with TLS, client certificates and a policy)")
	fs.StringVar(&cfg.only, "only", "", "comma-separated parts to run: load,sqlcheck,stale,pgbench,redisbench,propagation,failover,elections (default all)")
	fs.IntVar(&cfg.killTrials, "kill-trials", 0, "failover trials with a leader SIGKILL (default 20, quick 3)")
	fs.IntVar(&cfg.resignTrials, "resign-trials", 0, "failover trials with a resigning leader (default 50, quick 10)")
	fs.IntVar(&cfg.propTrials, "propagation-trials", 0, "term propagation trials (default 100, quick 20)")
	fs.IntVar(&cfg.elections, "elections", 0, "elections to add for the many-elections check (default 10000, quick 2000)")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lease TTL of the leaders in the failover trials")
	fs.IntVar(&cfg.grpcPerConn, "grpc-clients-per-conn", 8, "gRPC clients sharing one connection (real clients are separate processes)")
	fs.StringVar(&cfg.profileDir, "profile-dir", "", "save fencegate CPU profiles (pprof) of the 64-client fencegate loads, and a heap profile, in this `dir`")
	fs.BoolVar(&cfg.etcdNoFsync, "etcd-nofsync", false, "run the embedded etcd without fsync")
	fs.StringVar(&cfg.gateArgs, "fencegate-args", "", "extra space-separated flags for fencegate serve")
	fs.IntVar(&cfg.gateProcs, "fencegate-gomaxprocs", 0, "GOMAXPROCS of the fencegate processes (0: Go's default, the machine's CPUs)")
	fs.StringVar(&cfg.gateGodebug, "fencegate-godebug", "", "GODEBUG of the fencegate processes only, e.g. schedtrace=2000000000 as deploy/container/Dockerfile sets it (empty: the bench's own environment)")
	fs.BoolVar(&cfg.backendUnix, "backend-unix", false, "fencegate, pgbouncer and nutcracker reach PostgreSQL and Redis over their Unix sockets, as a proxy on the databases' host would; the direct paths' clients stay on TCP")
	fs.IntVar(&cfg.pgConns, "pg-conns", 2*runtime.NumCPU(), "fencegate's PostgreSQL pool (--postgres-max-conns); 0 keeps fencegate's default; 2 × CPUs is PostgreSQL's rule of thumb for a server with this many cores")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fencebench [flags]\n\nCompares fencegate's write path with direct PostgreSQL and Redis writes on servers it starts itself.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// A parse error is one line (main prints it), not the error and then
	// every flag; --help goes to stdout.
	fs.SetOutput(io.Discard)
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(os.Stdout)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, errors.New(flagerr.Explain(err, fs))
	}
	if fs.NArg() > 0 {
		// A stray word must not start the whole benchmark.
		return cfg, fmt.Errorf("unexpected argument %q: fencebench takes flags only", fs.Arg(0))
	}
	// 0 is "the default" for most of these; below it is a mistake that
	// would otherwise start every server before failing, or measure
	// nothing.
	for _, r := range []struct {
		ok   bool
		flag string
		got  any
	}{
		{cfg.duration >= 0, "--duration", cfg.duration},
		{cfg.warmup >= 0, "--warmup", cfg.warmup},
		{cfg.reps >= 0, "--reps", cfg.reps},
		{cfg.killTrials >= 0, "--kill-trials", cfg.killTrials},
		{cfg.resignTrials >= 0, "--resign-trials", cfg.resignTrials},
		{cfg.propTrials >= 0, "--propagation-trials", cfg.propTrials},
		{cfg.elections >= 0, "--elections", cfg.elections},
		{cfg.pgConns >= 0, "--pg-conns", cfg.pgConns},
		{cfg.gateProcs >= 0, "--fencegate-gomaxprocs", cfg.gateProcs},
	} {
		if !r.ok {
			return cfg, fmt.Errorf("%s=%v is negative: want 0 (the default) or more", r.flag, r.got)
		}
	}
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if cfg.quick {
				*v = quick
			}
		}
	}
	defd := func(v *time.Duration, full, quick time.Duration) {
		if *v == 0 {
			*v = full
			if cfg.quick {
				*v = quick
			}
		}
	}
	defd(&cfg.duration, 5*time.Second, time.Second)
	defd(&cfg.warmup, time.Second, 300*time.Millisecond)
	def(&cfg.reps, 2, 1)
	def(&cfg.killTrials, 20, 3)
	def(&cfg.resignTrials, 50, 10)
	def(&cfg.propTrials, 100, 20)
	def(&cfg.elections, 10000, 2000)
	var err error
	if cfg.clients, err = intList(*clients, "1,16,64"); err != nil {
		return cfg, fmt.Errorf("--clients: %w", err)
	}
	hotDefault := "16,64"
	if cfg.quick {
		hotDefault = "64"
	}
	if cfg.hotClients, err = intList(*hot, hotDefault); err != nil {
		return cfg, fmt.Errorf("--hot-clients: %w", err)
	}
	if cfg.ttl < time.Second || cfg.ttl%time.Second != 0 {
		return cfg, errors.New("--ttl must be a whole number of seconds, at least 1s")
	}
	if cfg.grpcPerConn < 1 {
		return cfg, errors.New("--grpc-clients-per-conn must be at least 1")
	}
	for _, p := range splitList(cfg.paths) {
		if !isPath(p) {
			return cfg, fmt.Errorf("--paths: unknown path %q", p)
		}
	}
	for _, p := range splitList(cfg.only) {
		switch p {
		case "load", "sqlcheck", "stale", "pgbench", "redisbench", "propagation", "failover", "elections":
		default:
			return cfg, fmt.Errorf("--only: unknown part %q", p)
		}
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func intList(s, def string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		s = def
	}
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// wants reports whether part is to be run.
func (c config) wants(part string) bool {
	parts := splitList(c.only)
	if len(parts) == 0 {
		return true
	}
	for _, p := range parts {
		if p == part {
			return true
		}
	}
	return false
}

// runs reports whether part is to be run: wanted, and for the pgbench and
// redisbench parts, whose runs of 5 s each would take --quick past 2
// minutes, named in --only when --quick is set.
func (c config) runs(part string) bool {
	if (part == "pgbench" || part == "redisbench") && c.quick && c.only == "" {
		return false
	}
	return c.wants(part)
}

// wantsSecure reports whether a secure path is to be measured, so the
// secure gateway is needed.
func (c config) wantsSecure() bool {
	if !c.wants("load") {
		return false
	}
	for _, p := range allPaths {
		if secure(p) && c.wantsPath(p) {
			return true
		}
	}
	return false
}

// wantsPath reports whether path is to be measured.
func (c config) wantsPath(path string) bool {
	ps := splitList(c.paths)
	if len(ps) == 0 {
		return true
	}
	for _, p := range ps {
		if p == path {
			return true
		}
	}
	return false
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
