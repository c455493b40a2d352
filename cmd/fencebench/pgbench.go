package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The pgbench part runs PostgreSQL's own pgbench, -M prepared, one INSERT
// per transaction, against fencegate's listener, directly (plain, and
// fenced by hand) and through pgbouncer, on the servers of the run.
// pgbench passes the fence and token to fencegate in PGOPTIONS, one fence
// per pgbench process, so all its clients write to one (hot) fence.
// pgbench-bouncer-fenced sends pgbench-direct-fenced's pipeline through
// pgbouncer: the same transaction as fencegate's, through the peer. The
// p50 and p99 come from pgbench's log of every transaction (-l).

// The pgbench targets, in report order.
const (
	pgbenchDirectPlain   = "pgbench-direct-plain"
	pgbenchDirectFenced  = "pgbench-direct-fenced"
	pgbenchWire          = "pgbench-wire"
	pgbenchBouncer       = "pgbench-bouncer"
	pgbenchBouncerFenced = "pgbench-bouncer-fenced"
)

var pgbenchTargets = []string{pgbenchDirectPlain, pgbenchDirectFenced, pgbenchWire, pgbenchBouncer, pgbenchBouncerFenced}

const pgbenchFence = "bench-pgbench"

// pgbenchPlainScript is the transaction of every target but
// pgbench-direct-fenced: fencegate adds the fence check to it.
const pgbenchPlainScript = "INSERT INTO bench_ledger(worker, token) VALUES ('pgbench', :client_id);\n"

// pgbenchFencedScript is what fencegate's listener sends for the plain
// script, sent directly: the fence check and the INSERT in one pipeline
// ending in one Sync, so one implicit transaction and one round trip.
func pgbenchFencedScript(token int64) string {
	return "\\startpipeline\n" +
		"SELECT fencegate.advance('" + pgbenchFence + "', " + strconv.FormatInt(token, 10) + ");\n" +
		pgbenchPlainScript +
		"\\endpipeline\n"
}

// pgbenchRun is how one target is run: the command line and environment.
type pgbenchRun struct {
	args []string
	env  []string
}

func (b *bench) pgbenchCommand(target, dir string, clients int, token int64) pgbenchRun {
	host, port := hostPort(b.env.pgDSNAddr())
	script := filepath.Join(dir, "plain.sql")
	user := benchWorkerRole
	var env []string
	switch target {
	case pgbenchDirectFenced:
		script = filepath.Join(dir, "fenced.sql")
	case pgbenchWire:
		host, port = hostPort(b.env.gate.pgAddr)
		user = benchListenerRole
		env = append(env, fmt.Sprintf("PGOPTIONS=-c fencegate.fence=%s -c fencegate.token=%d", pgbenchFence, token))
	case pgbenchBouncer:
		host, port = hostPort(b.env.bouncer.addr)
	case pgbenchBouncerFenced:
		host, port = hostPort(b.env.bouncer.addr)
		script = filepath.Join(dir, "fenced.sql")
	}
	// At least 5 s: pgbench's clock runs while it connects its clients
	// (64 take a while on a loaded machine), and fencegate's connection
	// start is a round trip longer than the database's.
	secs := max(5, int((b.cfg.duration+time.Second/2)/time.Second))
	args := []string{
		"-n", "-M", "prepared", "-f", script, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(secs), "-l", "--log-prefix=" + pgbenchLogPrefix, "-h", host, "-p", port, "-U", user, "postgres",
	}
	return pgbenchRun{args: args, env: env}
}

// shellLine is the run as a shell command, for the report.
func (r pgbenchRun) shellLine() string {
	var sb strings.Builder
	for _, e := range r.env {
		k, v, _ := strings.Cut(e, "=")
		sb.WriteString(k + "='" + v + "' ")
	}
	sb.WriteString("pgbench " + strings.Join(r.args, " "))
	return sb.String()
}

func hostPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}

func (e *env) pgDSNAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.pg.Port())) }

var (
	reTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	reClients = regexp.MustCompile(`(?m)^number of clients: ([0-9]+)`)
	reFailed  = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
	reTxns    = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
)

// runPgbench runs every target at every client count, interleaved and
// repeated as the loads are, and reports the median of the repetitions.
func (b *bench) runPgbench(ctx context.Context) error {
	if _, err := exec.LookPath("pgbench"); err != nil {
		return errors.New("pgbench is not installed: install the Debian package postgresql-client (or postgresql)")
	}
	dir, err := os.MkdirTemp("", "fencebench-pgbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := b.campaign(ctx, pgbenchFence, 30*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = l.Resign(context.WithoutCancel(ctx)) }()
	if err := os.WriteFile(filepath.Join(dir, "plain.sql"), []byte(pgbenchPlainScript), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "fenced.sql"), []byte(pgbenchFencedScript(l.Token())), 0o644); err != nil {
		return err
	}
	for _, n := range b.cfg.clients {
		type obs struct{ tps, lat, p50, p99, cpu []float64 }
		got := map[string]*obs{}
		lines := map[string]string{}
		for rep := range b.cfg.reps {
			order := slices.Clone(pgbenchTargets)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for _, t := range order {
				if err := b.env.truncate(ctx); err != nil {
					return err
				}
				run := b.pgbenchCommand(t, dir, n, l.Token())
				lines[t] = run.shellLine()
				pid := 0
				switch t {
				case pgbenchWire:
					pid = b.env.gate.pid()
				case pgbenchBouncer, pgbenchBouncerFenced:
					pid = b.env.bouncer.pid()
				}
				f, err := runPgbenchOnce(ctx, run, pid)
				if err != nil {
					return fmt.Errorf("%s, %d clients: %w", t, n, err)
				}
				if got[t] == nil {
					got[t] = &obs{}
				}
				o := got[t]
				o.tps, o.lat = append(o.tps, f.tps), append(o.lat, f.lat)
				o.p50, o.p99 = append(o.p50, f.p50), append(o.p99, f.p99)
				if pid != 0 {
					o.cpu = append(o.cpu, f.cpu)
				}
			}
		}
		for _, t := range pgbenchTargets {
			o := got[t]
			r := result{
				Scenario: "pgbench", Path: t, Clients: n, OpsPerSec: median(o.tps), AvgUs: round1(median(o.lat)),
				P50us: round1(median(o.p50)), P99us: round1(median(o.p99)), Note: lines[t],
			}
			if len(o.cpu) > 0 {
				c := median(o.cpu)
				r.CPUusPerOp = &c
			}
			b.emit(r)
			logf("pgbench   %3d clients %-22s %9.0f tps  latency average %7.1f µs  p50 %7.1f µs", n, t, r.OpsPerSec, r.AvgUs, r.P50us)
		}
	}
	return nil
}

// pgbenchFigures is what one pgbench run measured: its tps (without the
// initial connection time), the average latency in µs that tps gives
// (clients / tps: pgbench's own average counts the connection time in),
// the p50 and p99 of its log of every transaction, and the CPU µs per
// transaction of the proxy over the run.
type pgbenchFigures struct{ tps, lat, p50, p99, cpu float64 }

// runPgbenchOnce runs pgbench, logging every transaction (-l) in a
// directory of its own, and reads its figures. pid is the proxy's, or 0.
func runPgbenchOnce(ctx context.Context, run pgbenchRun, pid int) (pgbenchFigures, error) {
	var f pgbenchFigures
	logDir, err := os.MkdirTemp("", "fencebench-pgbench-log-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(logDir)
	cmd := exec.CommandContext(ctx, "pgbench", run.args...)
	cmd.Dir = logDir
	env := []string{"PGSSLMODE=disable"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, run.env...)
	var cpu0 time.Duration
	if pid != 0 {
		cpu0, _ = cpuTime(pid)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return f, fmt.Errorf("%s: %w: %s", run.shellLine(), err, truncate(strings.TrimSpace(string(out)), 400))
	}
	m := reTPS.FindSubmatch(out)
	mc := reClients.FindSubmatch(out)
	if m == nil || mc == nil {
		return f, fmt.Errorf("cannot read pgbench's output: %s", truncate(string(out), 400))
	}
	if mt := reTxns.FindSubmatch(out); mt != nil && string(mt[1]) == "0" {
		return f, fmt.Errorf("no transaction completed in the time left after connecting (a longer --duration helps): %s", truncate(string(out), 400))
	}
	if fl := reFailed.FindSubmatch(out); fl != nil && string(fl[1]) != "0" {
		return f, fmt.Errorf("%s failed transactions: %s", fl[1], truncate(string(out), 400))
	}
	f.tps, _ = strconv.ParseFloat(string(m[1]), 64)
	if clients, _ := strconv.ParseFloat(string(mc[1]), 64); f.tps > 0 {
		f.lat = clients / f.tps * 1e6
	}
	if pid != 0 {
		cpu1, _ := cpuTime(pid)
		if mt := reTxns.FindSubmatch(out); mt != nil {
			if n, _ := strconv.ParseFloat(string(mt[1]), 64); n > 0 {
				f.cpu = round1(us(cpu1-cpu0) / n)
			}
		}
	}
	lats, err := pgbenchLatencies(logDir)
	if err != nil {
		return f, fmt.Errorf("%s: %w", run.shellLine(), err)
	}
	f.p50, f.p99 = us(percentile(lats, 0.50)), us(percentile(lats, 0.99))
	return f, nil
}

// pgbenchLogPrefix names the files of pgbench's log of every transaction
// (-l), written in the directory pgbench runs in.
const pgbenchLogPrefix = "tx"

// pgbenchLatencies reads the latency (ns, sorted) of every transaction in the
// logs pgbench -l wrote in dir: one file per thread, one line per
// transaction, "client_id transaction_no time script_no time_epoch time_us".
func pgbenchLatencies(dir string) ([]int64, error) {
	files, err := filepath.Glob(filepath.Join(dir, pgbenchLogPrefix+".*"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("pgbench -l wrote no log in %s", dir)
	}
	var lats []int64
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		for line := range strings.Lines(string(b)) {
			fs := strings.Fields(line)
			if len(fs) < 3 {
				continue
			}
			v, err := strconv.ParseInt(fs[2], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: cannot read the latency of %q", name, strings.TrimSpace(line))
			}
			lats = append(lats, v*int64(time.Microsecond))
		}
	}
	if len(lats) == 0 {
		return nil, fmt.Errorf("pgbench -l logged no transaction in %s", dir)
	}
	slices.Sort(lats)
	return lats, nil
}

// pgbenchRows are the pgbench part's results.
func (r *report) pgbenchRows() []result {
	var out []result
	for _, x := range r.results {
		if x.Scenario == "pgbench" {
			out = append(out, x)
		}
	}
	return out
}

const pgbenchHeader = "pgbench\tclients\ttps\t× direct-fenced\t× bouncer\t× bouncer-fenced\tlatency avg µs\tp50 µs\tp99 µs\tproxy CPU µs/tx\t"

func (r *report) pgbenchCells(x result) []string {
	return []string{
		x.Path, strconv.Itoa(x.Clients), fmt.Sprintf("%.0f", x.OpsPerSec),
		r.peerRatio(x, pgbenchDirectFenced), r.peerRatio(x, pgbenchBouncer), r.peerRatio(x, pgbenchBouncerFenced),
		fmt.Sprintf("%.1f", x.AvgUs), fmt.Sprintf("%.0f", x.P50us), fmt.Sprintf("%.0f", x.P99us), optf(x.CPUusPerOp, 1),
	}
}

func (r *report) printPgbench(w io.Writer) {
	printRows(w, pgbenchHeader, r.pgbenchRows(), r.pgbenchCells)
}

func (r *report) markdownPgbench(w io.Writer) {
	rows := r.pgbenchRows()
	markdownRows(w, "pgbench (`-M prepared`, one INSERT per transaction, one hot fence, median of the repetitions; latency avg is clients / tps, p50 and p99 from pgbench's log of every transaction; the commands are below):",
		pgbenchHeader, rows, r.pgbenchCells, func(x result) bool { return x.Clients == rows[len(rows)-1].Clients })
}

// pgbenchGoals are issue 13's goals measured with pgbench (one hot fence).
func (r *report) pgbenchGoals() []goal {
	if len(r.pgbenchRows()) == 0 {
		return nil
	}
	var gs []goal
	vs := func(path, other string, clients int, least float64) {
		name := fmt.Sprintf("pgbench: %s ≥ %.2f × %s, %d clients", path, least, other, clients)
		gs = append(gs, r.rateGoal(name, "pgbench", path, other, clients, least))
	}
	for _, n := range []int{16, 64} {
		vs(pgbenchWire, pgbenchDirectFenced, n, 0.85)
	}
	for _, n := range []int{1, 16, 64} {
		vs(pgbenchWire, pgbenchBouncer, n, 1)
	}
	return append(gs, r.addedP50Goal("pgbench: added p50 of "+pgbenchWire+" over "+pgbenchDirectFenced+" ≤ 60 µs, 1 client",
		"pgbench", pgbenchWire, pgbenchDirectFenced, 1, 60))
}
