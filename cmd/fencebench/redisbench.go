package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/proxy/redis"
)

// The redisbench part runs Redis's own redis-benchmark: SET on distinct
// keys of one fence, against Redis directly (the plain SET, and the
// EVALSHA fencegate sends for it), through nutcracker (the same two), and
// through fencegate's RESP listener (the SET, logged in with the fence and
// its token; fencegate adds the fence). It is the client the Redis
// goals name (`-P 16`): a C program on one thread, whose own CPU leaves
// the proxies under test theirs, where the load part's clients are
// goroutines of this process.

// The redisbench targets, in report order.
const (
	rbDirectPlain     = "redisbench-direct-plain"
	rbDirectFenced    = "redisbench-direct-fenced"
	rbTwemproxy       = "redisbench-twemproxy"
	rbTwemproxyFenced = "redisbench-twemproxy-fenced"
	rbRESP            = "redisbench-resp"
)

var redisbenchTargets = []string{rbDirectPlain, rbDirectFenced, rbTwemproxy, rbTwemproxyFenced, rbRESP}

// redisbenchFence is the part's fence; its keys are
// {bench-rb}:k:<random>, so a proxy in front of Redis Cluster would send
// them all to one slot, as fencegate requires.
const (
	redisbenchFence = "bench-rb"
	redisbenchKey   = "{" + redisbenchFence + "}:k:__rand_int__"
)

// redisbenchPipeline is the -P of the runs at the largest client count
// besides -P 1: issue 14's "≥ 0.80 × with -P 16".
const redisbenchPipeline = 16

// redisbenchScenario names a result's scenario by its pipeline depth.
func redisbenchScenario(pipeline int) string {
	if pipeline == 1 {
		return "redisbench"
	}
	return "redisbench-P" + strconv.Itoa(pipeline)
}

// redisbenchRun is one redis-benchmark invocation but for -n, which each
// run sets: a target, its address, login and command.
type redisbenchRun struct {
	target   string
	addr     string
	auth     []string // --user, -a
	command  []string
	clients  int
	pipeline int
}

func (r redisbenchRun) args(n int) []string {
	host, port := hostPort(r.addr)
	a := []string{"-h", host, "-p", port}
	a = append(a, r.auth...)
	a = append(a, "-c", strconv.Itoa(r.clients), "-n", strconv.Itoa(n), "-r", "100000",
		"-P", strconv.Itoa(r.pipeline), "-e", "--csv")
	return append(a, r.command...)
}

// shellLine is the run as a shell command, for the report.
func (r redisbenchRun) shellLine(n int) string {
	args := r.args(n)
	for i, a := range args {
		if strings.ContainsAny(a, "{}: ") {
			args[i] = "'" + a + "'"
		}
	}
	return "redis-benchmark " + strings.Join(args, " ")
}

// redisbenchFigures is what one run measured.
type redisbenchFigures struct {
	rps, p50us, p99us float64
	requests          int
	proxyCPU          time.Duration // the proxy's (fencegate or nutcracker), 0 on direct targets
	redisCPU          time.Duration
	clientCPU         time.Duration // redis-benchmark's own
}

// runRedisbench runs every target at every client count with -P 1, and
// at the largest count with -P 16 too, interleaved and repeated as the
// loads are, and reports the median of the repetitions.
func (b *bench) runRedisbench(ctx context.Context) error {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		return errors.New("redis-benchmark is not installed: install the Debian package redis-tools (make deps does as root)")
	}
	if b.env.twem == nil {
		return errors.New("nutcracker is not running (internal error: startEnv starts it for this part)")
	}
	l, err := b.campaign(ctx, redisbenchFence, 30*time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = l.Resign(context.WithoutCancel(ctx)) }()
	rb, err := redis.Open(ctx, b.env.redisAddr, redis.DefaultConfig())
	if err != nil {
		return err
	}
	defer func() { _ = rb.Close() }()
	set := []string{"SET", redisbenchKey, "v"}
	// fencedCommand writes once through the backend, which loads the
	// script into Redis's cache and raises the fence's mark to the token.
	// The key is in the EVALSHA twice, among the script's keys and in the
	// SET it runs, and redis-benchmark draws each __rand_int__ on its own:
	// the script saves one random key for its rollback and sets another,
	// the same work as for one key, which a single Redis allows.
	fenced, err := fencedCommand(ctx, rb, target{fence: redisbenchFence, token: l.Token()}, set)
	if err != nil {
		return err
	}
	runs := func(clients, pipeline int) []redisbenchRun {
		mk := func(t, addr string, auth, cmd []string) redisbenchRun {
			return redisbenchRun{target: t, addr: addr, auth: auth, command: cmd, clients: clients, pipeline: pipeline}
		}
		login := []string{"--user", redisbenchFence, "-a", strconv.FormatInt(l.Token(), 10)}
		return []redisbenchRun{
			mk(rbDirectPlain, b.env.redisAddr, nil, set),
			mk(rbDirectFenced, b.env.redisAddr, nil, fenced),
			mk(rbTwemproxy, b.env.twem.addr, nil, set),
			mk(rbTwemproxyFenced, b.env.twem.addr, nil, fenced),
			mk(rbRESP, b.env.gate.respAddr, login, set),
		}
	}
	type shape struct{ clients, pipeline int }
	var shapes []shape
	for _, n := range b.cfg.clients {
		shapes = append(shapes, shape{n, 1})
	}
	shapes = append(shapes, shape{slices.Max(b.cfg.clients), redisbenchPipeline})
	for _, s := range shapes {
		got := map[string][]redisbenchFigures{}
		lines := map[string]string{}
		for rep := range b.cfg.reps {
			order := runs(s.clients, s.pipeline)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for _, r := range order {
				f, line, err := b.redisbenchOnce(ctx, r)
				if err != nil {
					return fmt.Errorf("%s, %d clients, -P %d: %w", r.target, s.clients, s.pipeline, err)
				}
				got[r.target] = append(got[r.target], f)
				lines[r.target] = line
			}
		}
		for _, t := range redisbenchTargets {
			fs := got[t]
			pick := func(f func(redisbenchFigures) float64) float64 {
				xs := make([]float64, len(fs))
				for i, x := range fs {
					xs[i] = f(x)
				}
				return median(xs)
			}
			perOp := func(d func(redisbenchFigures) time.Duration) *float64 {
				v := round1(pick(func(x redisbenchFigures) float64 { return us(d(x)) / float64(x.requests) }))
				return &v
			}
			res := result{
				Scenario: redisbenchScenario(s.pipeline), Path: t, Clients: s.clients,
				OpsPerSec: pick(func(x redisbenchFigures) float64 { return x.rps }),
				P50us:     round1(pick(func(x redisbenchFigures) float64 { return x.p50us })),
				P99us:     round1(pick(func(x redisbenchFigures) float64 { return x.p99us })),
				ClientCPU: perOp(func(x redisbenchFigures) time.Duration { return x.clientCPU }),
				BackendCPU: perOp(func(x redisbenchFigures) time.Duration {
					return x.redisCPU
				}),
				Note: lines[t],
			}
			if t != rbDirectPlain && t != rbDirectFenced {
				res.CPUusPerOp = perOp(func(x redisbenchFigures) time.Duration { return x.proxyCPU })
			}
			b.emit(res)
			logf("redisbench %3d clients -P %-2d %-28s %9.0f rps  p50 %7.1f µs", s.clients, s.pipeline, t, res.OpsPerSec, res.P50us)
		}
	}
	return nil
}

// redisbenchOnce runs r for about --duration: a short run first, which
// warms the connections and measures the rate, then the measured run with
// as many requests as that rate makes in --duration.
func (b *bench) redisbenchOnce(ctx context.Context, r redisbenchRun) (redisbenchFigures, string, error) {
	warm := max(1000, 200*r.clients*r.pipeline)
	f, err := b.redisbenchExec(ctx, r, warm)
	if err != nil {
		return f, "", err
	}
	n := max(warm, int(f.rps*b.cfg.duration.Seconds()))
	f, err = b.redisbenchExec(ctx, r, n)
	return f, r.shellLine(n), err
}

func (b *bench) redisbenchExec(ctx context.Context, r redisbenchRun, n int) (redisbenchFigures, error) {
	f := redisbenchFigures{requests: n}
	proxy := 0
	switch r.target {
	case rbTwemproxy, rbTwemproxyFenced:
		proxy = b.env.twem.pid()
	case rbRESP:
		proxy = b.env.gate.pid()
	}
	redisPID := b.env.rd.PID()
	var proxy0, redis0 time.Duration
	if proxy != 0 {
		proxy0, _ = cpuTime(proxy)
	}
	redis0, _ = cpuTime(redisPID)
	cmd := exec.CommandContext(ctx, "redis-benchmark", r.args(n)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return f, fmt.Errorf("%s: %w: %s", r.shellLine(n), err, truncate(strings.TrimSpace(stderr.String()+string(out)), 400))
	}
	// -e prints the server's error replies; a run that got any measured
	// something else than the write.
	if i := bytes.Index(out, []byte("Error from server")); i >= 0 {
		return f, fmt.Errorf("%s: %s", r.shellLine(n), truncate(string(out[i:]), 300))
	}
	if proxy != 0 {
		p1, _ := cpuTime(proxy)
		f.proxyCPU = p1 - proxy0
	}
	r1, _ := cpuTime(redisPID)
	f.redisCPU = r1 - redis0
	f.clientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if f.rps, f.p50us, f.p99us, err = parseRedisbenchCSV(out); err != nil {
		return f, fmt.Errorf("%s: %w", r.shellLine(n), err)
	}
	return f, nil
}

// parseRedisbenchCSV reads the requests per second and the p50 and p99
// latencies (µs) of redis-benchmark --csv's one test:
//
//	"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
//	"SET {bench-rb}:k:__rand_int__ v","96153.85","0.317","0.096","0.295","0.495","0.647","1.631"
func parseRedisbenchCSV(out []byte) (rps, p50, p99 float64, err error) {
	// Only the CSV lines: -e may print other lines before them.
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, `"`) {
			lines = append(lines, l)
		}
	}
	recs, err := csv.NewReader(strings.NewReader(strings.Join(lines, "\n"))).ReadAll()
	if err != nil || len(recs) != 2 {
		return 0, 0, 0, fmt.Errorf("cannot read redis-benchmark's --csv output: %q", truncate(string(out), 300))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	get := func(name string) (float64, error) {
		i, ok := col[name]
		if !ok || i >= len(recs[1]) {
			return 0, fmt.Errorf("redis-benchmark's --csv output has no %s column (redis-benchmark 7 or later prints it)", name)
		}
		return strconv.ParseFloat(recs[1][i], 64)
	}
	if rps, err = get("rps"); err != nil {
		return
	}
	if p50, err = get("p50_latency_ms"); err != nil {
		return
	}
	if p99, err = get("p99_latency_ms"); err != nil {
		return
	}
	return rps, p50 * 1000, p99 * 1000, nil
}

// redisbenchRows are the redisbench part's results.
func (r *report) redisbenchRows() []result {
	var out []result
	for _, x := range r.results {
		if strings.HasPrefix(x.Scenario, "redisbench") {
			out = append(out, x)
		}
	}
	return out
}

func redisbenchPipelineOf(scenario string) string {
	if p, ok := strings.CutPrefix(scenario, "redisbench-P"); ok {
		return p
	}
	return "1"
}

const redisbenchHeader = "redis-benchmark\tclients\t-P\trps\t× direct-fenced\t× twemproxy\tp50 µs\tp99 µs\tproxy CPU µs/op\tRedis CPU µs/op\tclient CPU µs/op\t"

func (r *report) redisbenchCells(x result) []string {
	return []string{
		x.Path, strconv.Itoa(x.Clients), redisbenchPipelineOf(x.Scenario), fmt.Sprintf("%.0f", x.OpsPerSec),
		r.peerRatio(x, rbDirectFenced), r.peerRatio(x, rbTwemproxy),
		fmt.Sprintf("%.0f", x.P50us), fmt.Sprintf("%.0f", x.P99us),
		optf(x.CPUusPerOp, 1), optf(x.BackendCPU, 1), optf(x.ClientCPU, 1),
	}
}

func (r *report) printRedisbench(w io.Writer) {
	printRows(w, redisbenchHeader, r.redisbenchRows(), r.redisbenchCells)
}

func (r *report) markdownRedisbench(w io.Writer) {
	rows := r.redisbenchRows()
	markdownRows(w, "redis-benchmark (SET on 100,000 random keys of one fence, median of the repetitions; p50 and p99 are redis-benchmark's; the commands of the last shape are below):",
		redisbenchHeader, rows, r.redisbenchCells, func(x result) bool {
			last := rows[len(rows)-1]
			return x.Scenario == last.Scenario && x.Clients == last.Clients
		})
}

// redisbenchGoals are issue 14's goals measured with redis-benchmark.
func (r *report) redisbenchGoals() []goal {
	if len(r.redisbenchRows()) == 0 {
		return nil
	}
	var gs []goal
	n := slices.Max(r.cfg.clients)
	vs := func(scenario, path, other string, least float64) {
		name := fmt.Sprintf("redis-benchmark: %s ≥ %.2f × %s, %d clients, -P %s", path, least, other, n, redisbenchPipelineOf(scenario))
		gs = append(gs, r.rateGoal(name, scenario, path, other, n, least))
	}
	vs("redisbench", rbRESP, rbDirectFenced, 0.60)
	vs(redisbenchScenario(redisbenchPipeline), rbRESP, rbDirectFenced, 0.80)
	vs("redisbench", rbRESP, rbTwemproxy, 0.80)
	return append(gs, r.addedP50Goal("redis-benchmark: added p50 of "+rbRESP+" over "+rbDirectFenced+" ≤ 50 µs, 1 client",
		"redisbench", rbRESP, rbDirectFenced, 1, 50))
}
