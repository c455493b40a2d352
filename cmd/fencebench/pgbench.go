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
	"text/tabwriter"
	"time"
)

// The pgbench part runs PostgreSQL's own pgbench, -M prepared, one INSERT
// per transaction, against fencegate's listener, directly (plain, and
// fenced by hand) and through pgbouncer, on the servers of the run.
// pgbench passes the fence and token to fencegate in PGOPTIONS, one fence
// per pgbench process, so all its clients write to one (hot) fence.

// The pgbench targets, in report order.
const (
	pgbenchDirectPlain  = "pgbench-direct-plain"
	pgbenchDirectFenced = "pgbench-direct-fenced"
	pgbenchWire         = "pgbench-wire"
	pgbenchBouncer      = "pgbench-bouncer"
)

var pgbenchTargets = []string{pgbenchDirectPlain, pgbenchDirectFenced, pgbenchWire, pgbenchBouncer}

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
	var env []string
	switch target {
	case pgbenchDirectFenced:
		script = filepath.Join(dir, "fenced.sql")
	case pgbenchWire:
		host, port = hostPort(b.env.gate.pgAddr)
		env = append(env, fmt.Sprintf("PGOPTIONS=-c fencegate.fence=%s -c fencegate.token=%d", pgbenchFence, token))
	case pgbenchBouncer:
		host, port = hostPort(b.env.bouncer.addr)
	}
	// At least 5 s: pgbench's clock runs while it connects its clients
	// (64 take a while on a loaded machine), and fencegate's connection
	// start is a round trip longer than the database's.
	secs := max(5, int((b.cfg.duration+time.Second/2)/time.Second))
	args := []string{"-n", "-M", "prepared", "-f", script, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(secs), "-h", host, "-p", port, "-U", benchWorkerRole, "postgres"}
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
		type obs struct{ tps, lat, cpu []float64 }
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
				case pgbenchBouncer:
					pid = b.env.bouncer.pid()
				}
				tps, lat, cpu, err := runPgbenchOnce(ctx, run, pid)
				if err != nil {
					return fmt.Errorf("%s, %d clients: %w", t, n, err)
				}
				if got[t] == nil {
					got[t] = &obs{}
				}
				got[t].tps = append(got[t].tps, tps)
				got[t].lat = append(got[t].lat, lat)
				if pid != 0 {
					got[t].cpu = append(got[t].cpu, cpu)
				}
			}
		}
		for _, t := range pgbenchTargets {
			o := got[t]
			r := result{Scenario: "pgbench", Path: t, Clients: n, OpsPerSec: median(o.tps), AvgUs: round1(median(o.lat)), Note: lines[t]}
			if len(o.cpu) > 0 {
				c := median(o.cpu)
				r.CPUusPerOp = &c
			}
			b.emit(r)
			logf("pgbench   %3d clients %-22s %9.0f tps  latency average %7.1f µs", n, t, r.OpsPerSec, r.AvgUs)
		}
	}
	return nil
}

// runPgbenchOnce runs pgbench and returns its tps (without the initial
// connection time), the average latency in µs that tps gives (clients /
// tps: pgbench's own average counts the connection time in), and the CPU
// µs per transaction of process pid (the proxy) over the run.
func runPgbenchOnce(ctx context.Context, run pgbenchRun, pid int) (tps, lat, cpuPerTx float64, err error) {
	cmd := exec.CommandContext(ctx, "pgbench", run.args...)
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
		return 0, 0, 0, fmt.Errorf("%s: %w: %s", run.shellLine(), err, truncate(strings.TrimSpace(string(out)), 400))
	}
	m := reTPS.FindSubmatch(out)
	mc := reClients.FindSubmatch(out)
	if m == nil || mc == nil {
		return 0, 0, 0, fmt.Errorf("cannot read pgbench's output: %s", truncate(string(out), 400))
	}
	if mt := reTxns.FindSubmatch(out); mt != nil && string(mt[1]) == "0" {
		return 0, 0, 0, fmt.Errorf("no transaction completed in the time left after connecting (a longer --duration helps): %s", truncate(string(out), 400))
	}
	if f := reFailed.FindSubmatch(out); f != nil && string(f[1]) != "0" {
		return 0, 0, 0, fmt.Errorf("%s failed transactions: %s", f[1], truncate(string(out), 400))
	}
	tps, _ = strconv.ParseFloat(string(m[1]), 64)
	if clients, _ := strconv.ParseFloat(string(mc[1]), 64); tps > 0 {
		lat = clients / tps * 1e6
	}
	if pid != 0 {
		cpu1, _ := cpuTime(pid)
		if mt := reTxns.FindSubmatch(out); mt != nil {
			if n, _ := strconv.ParseFloat(string(mt[1]), 64); n > 0 {
				cpuPerTx = round1(us(cpu1-cpu0) / n)
			}
		}
	}
	return tps, lat, cpuPerTx, nil
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

// pgbenchRatio is target's tps over other's at the same client count.
func (r *report) pgbenchRatio(x result, other string) string {
	y, ok := r.find("pgbench", other, x.Clients)
	if !ok || y.OpsPerSec == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x.OpsPerSec/y.OpsPerSec)
}

func (r *report) printPgbench(w io.Writer) {
	rows := r.pgbenchRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pgbench\tclients\ttps\t× direct-fenced\t× bouncer\tlatency avg µs\tproxy CPU µs/tx\t")
	for _, x := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%.1f\t%s\t\n", x.Path, x.Clients, x.OpsPerSec,
			r.pgbenchRatio(x, pgbenchDirectFenced), r.pgbenchRatio(x, pgbenchBouncer), x.AvgUs, optf(x.CPUusPerOp, 1))
	}
	tw.Flush()
}

func (r *report) markdownPgbench(w io.Writer) {
	rows := r.pgbenchRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\npgbench (`-M prepared`, one INSERT per transaction, median of the repetitions; latency avg is clients / tps; the commands are below):")
	fmt.Fprintln(w, "\n| pgbench | clients | tps | × direct-fenced | × bouncer | latency avg µs | proxy CPU µs/tx |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|")
	for _, x := range rows {
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %.1f | %s |\n", x.Path, x.Clients, x.OpsPerSec,
			r.pgbenchRatio(x, pgbenchDirectFenced), r.pgbenchRatio(x, pgbenchBouncer), x.AvgUs, optf(x.CPUusPerOp, 1))
	}
	fmt.Fprintln(w, "\n```sh")
	for _, x := range rows {
		if x.Clients == rows[len(rows)-1].Clients {
			fmt.Fprintln(w, x.Note)
		}
	}
	fmt.Fprintln(w, "```")
}
