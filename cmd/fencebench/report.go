package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one measurement. The first seven fields are the stable JSON
// form; the others appear where they apply.
type result struct {
	Scenario   string   `json:"scenario"`
	Path       string   `json:"path"`
	Clients    int      `json:"clients"`
	OpsPerSec  float64  `json:"ops_per_sec"`
	P50us      float64  `json:"p50_us"`
	P99us      float64  `json:"p99_us"`
	CPUusPerOp *float64 `json:"cpu_us_per_op"`                   // fencegate's CPU per request; null on direct paths
	ClientCPU  *float64 `json:"client_cpu_us_per_op,omitempty"`  // the load tool's process (clients; etcd is in it too)
	BackendCPU *float64 `json:"backend_cpu_us_per_op,omitempty"` // PostgreSQL (all its processes) or redis-server
	RSSMiB     *float64 `json:"rss_mib,omitempty"`
	PeakRSSMiB *float64 `json:"peak_rss_mib,omitempty"`
	MaxUs      float64  `json:"max_us,omitempty"`
	AvgUs      float64  `json:"avg_us,omitempty"` // pgbench's latency average
	Trials     int      `json:"trials,omitempty"`
	Errors     int64    `json:"errors,omitempty"`
	Note       string   `json:"note,omitempty"`
	// The sqlcheck part's figures for one statement.
	SQLCheck *sqlcheckFigures `json:"sqlcheck,omitempty"`
}

func (r result) jsonLine() string {
	for _, p := range []**float64{&r.CPUusPerOp, &r.ClientCPU, &r.BackendCPU} {
		if *p != nil {
			c := round2(**p)
			*p = &c
		}
	}
	r.OpsPerSec = float64(int64(r.OpsPerSec + 0.5))
	b, _ := json.Marshal(r)
	return string(b)
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// report collects a run's results.
type report struct {
	cfg          config
	date         time.Time
	machine      string
	results      []result
	staleBackend staleCheck
	took         time.Duration
	// The machine's other load: load averages at start and end, and the
	// CPUs' worth of busy time outside the benchmark's processes.
	loadStart, loadEnd string
	otherCPU, busy     float64
}

func (r *report) machineLoad() string {
	return fmt.Sprintf("load average %s at start, %s at end; CPUs busy %.2f of %d on average, of which %.2f not accounted to the benchmark's processes (other processes, interrupts)",
		r.loadStart, r.loadEnd, r.busy, numCPU(), r.otherCPU)
}

func newReport(cfg config) *report {
	return &report{cfg: cfg, date: time.Now(), machine: machine()}
}

func (r *report) add(x result) { r.results = append(r.results, x) }

func (r *report) find(scenario, path string, clients int) (result, bool) {
	for _, x := range r.results {
		if x.Scenario == scenario && x.Path == path && x.Clients == clients {
			return x, true
		}
	}
	return result{}, false
}

// reference is the path a path's throughput is compared with.
func reference(path string) string {
	switch path {
	case pgDirectFenced:
		return pgDirectPlain
	case pgGRPC, pgHTTP, pgWire, pgBouncerFenced:
		return pgDirectFenced
	case pgBouncer:
		return pgDirectPlain
	case redisDirectFenced:
		return redisDirectPlain
	case redisGRPC, redisHTTP, redisRESP, redisTwemproxyFenced:
		return redisDirectFenced
	case redisTwemproxy:
		return redisDirectPlain
	case pgGRPCSecure, pgHTTPSecure, redisGRPCSecure, redisHTTPSecure:
		// What TLS, client certificates and the policy cost.
		return plainTwin(path)
	}
	return ""
}

// ratio is x's throughput over its reference's in the same scenario.
func (r *report) ratio(x result) (float64, string, bool) {
	ref := reference(x.Path)
	if x.Scenario == "stale" {
		// Refusals against the accepted writes of the same path.
		ref = x.Path
		y, ok := r.find("distinct", ref, x.Clients)
		if !ok || y.OpsPerSec == 0 {
			return 0, "", false
		}
		return x.OpsPerSec / y.OpsPerSec, "accepted " + ref, true
	}
	if ref == "" {
		return 0, "", false
	}
	y, ok := r.find(x.Scenario, ref, x.Clients)
	if !ok || y.OpsPerSec == 0 {
		return 0, "", false
	}
	return x.OpsPerSec / y.OpsPerSec, ref, true
}

// printTable writes the table for people, then the goals.
func (r *report) printTable(w io.Writer) {
	fmt.Fprintf(w, "\nfencebench %s — %s — %s\n\n", r.mode(), r.date.Format(time.RFC3339), r.machine)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tclients\tpath\tops/s\t× ref\tp50 µs\tp99 µs\tCPU µs/op: fencegate\tclient\tbackend\tRSS MiB\terrors\t")
	for _, x := range r.loadRows() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%d\t\n", x.Scenario, x.Clients, x.Path, x.OpsPerSec,
			r.ratioText(x), x.P50us, x.P99us, optf(x.CPUusPerOp, 1), optf(x.ClientCPU, 1), optf(x.BackendCPU, 1), optf(x.RSSMiB, 1), x.Errors)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "timing\ttrials\tp50 ms\tp99 ms\tmax ms\t")
	for _, x := range r.timingRows() {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t  %s\n", x.Scenario, x.Trials, x.P50us/1000, x.P99us/1000, x.MaxUs/1000, x.Note)
	}
	tw.Flush()
	r.printSQLCheck(w)
	r.printPgbench(w)
	r.printRedisbench(w)
	if r.hasStale() {
		fmt.Fprintf(w, "\nbackends during the stale loads: %s\n", r.staleBackend)
	}
	fmt.Fprintf(w, "\ngoals:\n")
	for _, g := range r.goals() {
		fmt.Fprintf(w, "  [%s] %s: %s\n", g.mark(), g.name, g.value)
	}
	fmt.Fprintf(w, "\n(ratios are throughput over the reference path's in the same scenario and client count; took %s; %s)\n", r.took.Round(time.Second), r.machineLoad())
}

func (r *report) mode() string {
	if r.cfg.quick {
		return "quick"
	}
	return "full"
}

func (r *report) ratioText(x result) string {
	q, ref, ok := r.ratio(x)
	if !ok {
		return "-"
	}
	if x.Scenario == "stale" {
		return fmt.Sprintf("%.2f× acc", q)
	}
	_ = ref
	return fmt.Sprintf("%.2f", q)
}

func optf(f *float64, prec int) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, *f)
}

func (r *report) loadRows() []result {
	var out []result
	for _, x := range r.results {
		if x.Trials == 0 && x.OpsPerSec > 0 && x.Scenario != "pgbench" && !strings.HasPrefix(x.Scenario, "redisbench") {
			out = append(out, x)
		}
	}
	return out
}

func (r *report) timingRows() []result {
	var out []result
	for _, x := range r.results {
		if x.Trials > 0 {
			out = append(out, x)
		}
	}
	return out
}

func (r *report) hasStale() bool {
	for _, x := range r.results {
		if x.Scenario == "stale" {
			return true
		}
	}
	return false
}

// goal is one of issue 5's targets and what this run measured.
type goal struct {
	name  string
	value string
	state int // 0 not measured, 1 met, 2 missed
}

func (g goal) mark() string {
	return [...]string{"n/a", "met", "MISSED"}[g.state]
}

func check(ok bool) int {
	if ok {
		return 1
	}
	return 2
}

func (r *report) goals() []goal {
	var gs []goal
	ratioGoal := func(path string, clients int, minRatio float64) {
		name := fmt.Sprintf("%s ≥ %.2f × %s, %d clients, distinct fences", path, minRatio, reference(path), clients)
		x, ok := r.find("distinct", path, clients)
		if !ok {
			gs = append(gs, goal{name: name, value: "not measured"})
			return
		}
		q, _, ok := r.ratio(x)
		if !ok {
			gs = append(gs, goal{name: name, value: "not measured"})
			return
		}
		gs = append(gs, goal{name: name, value: ratioText(q, minRatio), state: check(q >= minRatio)})
	}
	for _, n := range []int{16, 64} {
		ratioGoal(pgGRPC, n, 0.85)
	}
	for _, n := range []int{16, 64} {
		ratioGoal(pgHTTP, n, 0.70)
	}
	for _, n := range r.cfg.clients {
		name := fmt.Sprintf("added p50 of pg-grpc over pg-direct-fenced ≤ 150 µs, %d clients", n)
		x, ok1 := r.find("distinct", pgGRPC, n)
		y, ok2 := r.find("distinct", pgDirectFenced, n)
		if !ok1 || !ok2 {
			gs = append(gs, goal{name: name, value: "not measured"})
			continue
		}
		d := x.P50us - y.P50us
		gs = append(gs, goal{name: name, value: fmt.Sprintf("%.0f µs", d), state: check(d <= 150)})
	}
	for _, n := range []int{16, 64} {
		ratioGoal(pgDirectFenced, n, 0.85)
	}
	gs = append(gs, r.wireGoals()...)
	gs = append(gs, r.respGoals()...)
	gs = append(gs, r.pgbenchGoals()...)
	gs = append(gs, r.redisbenchGoals()...)
	ratioGoal(redisGRPC, 64, 0.60)
	ratioGoal(redisHTTP, 64, 0.45)
	for _, p := range []string{pgGRPCSecure, redisGRPCSecure, pgHTTPSecure, redisHTTPSecure} {
		ratioGoal(p, 16, 0.90)
	}
	for _, x := range r.results {
		if x.Scenario != "stale" {
			continue
		}
		name := fmt.Sprintf("stale refusals ≥ 3 × accepted writes, %s, %d clients", x.Path, x.Clients)
		q, _, ok := r.ratio(x)
		if !ok {
			gs = append(gs, goal{name: name, value: "no accepted figure to compare with"})
			continue
		}
		gs = append(gs, goal{name: name, value: fmt.Sprintf("%.2f×", q), state: check(q >= 3 && x.Errors == 0)})
	}
	if r.hasStale() {
		gs = append(gs, goal{name: "no backend request for a stale token", value: r.staleBackend.String(), state: check(r.staleBackend.ok)})
	}
	timing := func(scenario string, limit time.Duration, what string) {
		for _, x := range r.results {
			if x.Scenario == scenario {
				p99 := time.Duration(x.P99us * float64(time.Microsecond))
				gs = append(gs, goal{
					name:  fmt.Sprintf("%s p99 ≤ %v", what, limit),
					value: fmt.Sprintf("%.1f ms over %d trials", x.P99us/1000, x.Trials), state: check(p99 <= limit),
				})
				return
			}
		}
		gs = append(gs, goal{name: fmt.Sprintf("%s p99 ≤ %v", what, limit), value: "not measured"})
	}
	timing("failover-kill", r.cfg.ttl+500*time.Millisecond, fmt.Sprintf("failover after leader SIGKILL (TTL %v)", r.cfg.ttl))
	timing("failover-resign", 150*time.Millisecond, "failover after resign")
	timing("term-propagation", 50*time.Millisecond, "term propagation")
	var rss float64
	for _, x := range r.results {
		if x.Clients == 64 && x.RSSMiB != nil {
			rss = max(rss, *x.RSSMiB)
		}
	}
	if rss > 0 {
		gs = append(gs, goal{name: "fencegate RSS ≤ 100 MiB at 64 clients", value: fmt.Sprintf("%.1f MiB (peak sampled)", rss), state: check(rss <= 100)})
	} else {
		gs = append(gs, goal{name: "fencegate RSS ≤ 100 MiB at 64 clients", value: "not measured"})
	}
	timing(fmt.Sprintf("term-propagation-%d-elections", r.cfg.elections), 50*time.Millisecond,
		fmt.Sprintf("term propagation with %d elections watched", r.cfg.elections))
	return append(gs, r.sqlcheckGoals()...)
}

// wireGoals are issue 13's targets for fencegate's PostgreSQL listener.
func (r *report) wireGoals() []goal {
	var gs []goal
	for _, n := range []int{16, 64} {
		gs = append(gs, r.vsGoal(pgWire, pgDirectFenced, n, 0.85))
	}
	for _, n := range []int{1, 16, 64} {
		gs = append(gs, r.vsGoal(pgWire, pgBouncer, n, 1))
	}
	gs = append(gs, r.addedP50Goal("added p50 of pg-wire over pg-direct-fenced ≤ 60 µs, 1 client",
		"distinct", pgWire, pgDirectFenced, 1, 60))
	x, haveWire := r.find("distinct", pgWire, 1)
	// A refusal that went to PostgreSQL would take an accepted write's
	// round trip; the backend counters (below) count them too.
	name := "pg-wire stale refusal p50 < ½ accepted pg-wire p50, 1 client"
	s, haveStale := r.find("stale", pgWire, 1)
	if haveStale && haveWire {
		gs = append(gs, goal{name: name, value: fmt.Sprintf("%.1f µs vs %.1f µs", s.P50us, x.P50us), state: check(s.P50us < x.P50us/2 && s.Errors == 0)})
	} else {
		gs = append(gs, goal{name: name, value: "not measured"})
	}
	return gs
}

// vsGoal is the goal that path's throughput is at least least × other's,
// at clients distinct fences.
func (r *report) vsGoal(path, other string, clients int, least float64) goal {
	name := fmt.Sprintf("%s ≥ %.2f × %s, %d clients, distinct fences", path, least, other, clients)
	return r.rateGoal(name, "distinct", path, other, clients, least)
}

// rateGoal is the goal named name that path's throughput is at least
// least × other's in scenario at clients, without errors.
func (r *report) rateGoal(name, scenario, path, other string, clients int, least float64) goal {
	x, ok1 := r.find(scenario, path, clients)
	y, ok2 := r.find(scenario, other, clients)
	if !ok1 || !ok2 || y.OpsPerSec == 0 {
		return goal{name: name, value: "not measured"}
	}
	q := x.OpsPerSec / y.OpsPerSec
	return goal{name: name, value: ratioText(q, least), state: check(q >= least && x.Errors == 0)}
}

// ratioText prints ratio q of a goal of at least least. A miss says by how
// much, and never reads as the goal's own figure: 0.6996 against 0.70
// prints as 0.6996, short by 0.04 % of the reference, not as 0.70.
func ratioText(q, least float64) string {
	if q >= least {
		return fmt.Sprintf("%.2f", q)
	}
	v := fmt.Sprintf("%.2f", q)
	if v == fmt.Sprintf("%.2f", least) {
		v = fmt.Sprintf("%.4f", q)
	}
	short := (least - q) * 100
	if short < 1 {
		return fmt.Sprintf("%s (short by %.2f%% of the reference)", v, short)
	}
	return fmt.Sprintf("%s (short by %.0f%% of the reference)", v, short)
}

// addedP50Goal is the goal named name that path's p50 exceeds other's by
// at most limit µs in scenario at clients.
func (r *report) addedP50Goal(name, scenario, path, other string, clients int, limit float64) goal {
	x, ok1 := r.find(scenario, path, clients)
	y, ok2 := r.find(scenario, other, clients)
	if !ok1 || !ok2 {
		return goal{name: name, value: "not measured"}
	}
	d := x.P50us - y.P50us
	return goal{name: name, value: fmt.Sprintf("%.0f µs", d), state: check(d <= limit)}
}

// peerRatio is x's throughput over other's in the same scenario at the
// same client count, as a table cell ("-" when other was not measured).
func (r *report) peerRatio(x result, other string) string {
	y, ok := r.find(x.Scenario, other, x.Clients)
	if !ok || y.OpsPerSec == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x.OpsPerSec/y.OpsPerSec)
}

// printRows prints rows as a table of header's tab-separated columns.
func printRows(w io.Writer, header string, rows []result, cells func(result) []string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	for _, x := range rows {
		fmt.Fprintln(tw, strings.Join(cells(x), "\t")+"\t")
	}
	tw.Flush()
}

// markdownRows writes intro, rows as a Markdown table of header's
// columns, and the commands (each row's Note) of the rows last picks.
func markdownRows(w io.Writer, intro, header string, rows []result, cells func(result) []string, last func(result) bool) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n"+intro)
	head := strings.Split(strings.TrimSuffix(header, "\t"), "\t")
	fmt.Fprintln(w, "\n| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(w, "|---|"+strings.Repeat("--:|", len(head)-1))
	for _, x := range rows {
		fmt.Fprintln(w, "| "+strings.Join(cells(x), " | ")+" |")
	}
	fmt.Fprintln(w, "\n```sh")
	for _, x := range rows {
		if last(x) {
			fmt.Fprintln(w, x.Note)
		}
	}
	fmt.Fprintln(w, "```")
}

// respGoals are issue 14's targets for fencegate's RESP listener (the
// pipelined one, -P 16, is measured with redis-benchmark:
// docs/BENCHMARKS.md).
func (r *report) respGoals() []goal {
	gs := []goal{
		r.vsGoal(redisRESP, redisDirectFenced, 64, 0.60),
		r.vsGoal(redisRESP, redisTwemproxy, 64, 0.80),
	}
	return append(gs, r.addedP50Goal("added p50 of redis-resp over redis-direct-fenced ≤ 50 µs, 1 client",
		"distinct", redisRESP, redisDirectFenced, 1, 50))
}

// Markers delimiting the generated part of the Markdown report.
const (
	mdBegin = "<!-- fencebench:begin (generated by cmd/fencebench --markdown; edits inside are overwritten) -->"
	mdEnd   = "<!-- fencebench:end -->"
)

// writeMarkdown replaces the generated part of path, keeping the rest.
func (r *report) writeMarkdown(path string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var gen bytes.Buffer
	gen.WriteString(mdBegin + "\n")
	r.markdown(&gen)
	gen.WriteString(mdEnd + "\n")
	s := string(old)
	i := strings.Index(s, mdBegin)
	j := strings.Index(s, mdEnd)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + gen.String() + strings.TrimPrefix(s[j+len(mdEnd):], "\n")
	case s == "":
		s = "# fencegate benchmarks\n\n" + gen.String()
	default:
		s = strings.TrimRight(s, "\n") + "\n\n" + gen.String()
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func (r *report) markdown(w io.Writer) {
	fmt.Fprintf(w, "\n**Run:** %s mode, %s, took %s.  \n", r.mode(), r.date.Format("2006-01-02 15:04 MST"), r.took.Round(time.Second))
	fmt.Fprintf(w, "**Machine:** %s; %s; GOMAXPROCS %d; load tool, fencegate, etcd, PostgreSQL and Redis all on it.  \n",
		r.machine, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "**Machine load:** %s.  \n", r.machineLoad())
	fmt.Fprintf(w, "**Command:** `%s` (each load: %v warm-up, %v measured, %d repetition(s) with the path order reversed on odd ones; gRPC: %d clients per connection; fencegate's PostgreSQL pool: %d connections).\n\n",
		r.cfg.command, r.cfg.warmup, r.cfg.duration, r.cfg.reps, r.cfg.grpcPerConn, r.cfg.pgConns)
	fmt.Fprintln(w, "| scenario | clients | path | ops/s | × ref | p50 µs | p99 µs | fencegate CPU µs/op | client CPU µs/op | backend CPU µs/op | RSS MiB | errors |")
	fmt.Fprintln(w, "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, x := range r.loadRows() {
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %s | %.1f | %.1f | %s | %s | %s | %s | %d |\n", x.Scenario, x.Clients, x.Path, x.OpsPerSec,
			r.ratioText(x), x.P50us, x.P99us, optf(x.CPUusPerOp, 1), optf(x.ClientCPU, 1), optf(x.BackendCPU, 1), optf(x.RSSMiB, 1), x.Errors)
	}
	fmt.Fprintln(w, "\n× ref: throughput over the reference path's in the same scenario and client count (pg-direct-fenced and pg-bouncer over pg-direct-plain, gateway paths (redis-resp included), pg-bouncer-fenced and redis-twemproxy-fenced over the direct fenced path of their backend, redis-twemproxy over redis-direct-plain, -secure paths (TLS, client certificates, a policy and a postgres_role) over the same path through the plain gateway; stale rows over the same path's accepted writes, distinct fences).")
	fmt.Fprintln(w, "\n| timing | trials | p50 ms | p99 ms | max ms | note |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|")
	for _, x := range r.timingRows() {
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.2f | %s |\n", x.Scenario, x.Trials, x.P50us/1000, x.P99us/1000, x.MaxUs/1000, x.Note)
	}
	for _, x := range r.results {
		if x.PeakRSSMiB != nil {
			fmt.Fprintf(w, "\n%s: fencegate RSS %.1f MiB, peak since start %.1f MiB.\n", x.Scenario, *x.RSSMiB, *x.PeakRSSMiB)
		}
	}
	r.markdownSQLCheck(w)
	r.markdownPgbench(w)
	r.markdownRedisbench(w)
	if r.hasStale() {
		fmt.Fprintf(w, "\nBackends during the stale loads: %s.\n", r.staleBackend)
	}
	fmt.Fprintln(w, "\n| goal | measured | |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, g := range r.goals() {
		fmt.Fprintf(w, "| %s | %s | %s |\n", g.name, g.value, g.mark())
	}
	fmt.Fprintln(w)
}
