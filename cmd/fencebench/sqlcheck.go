package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/postgres/sqlcheck"
)

// sqlcheckGoalPct is the goal: what PostgreSQL's parser adds over
// the old keyword filter is at most this percentage of a fenced write.
const sqlcheckGoalPct = 5.0

// sqlStatement is one statement the sqlcheck part times.
type sqlStatement struct {
	name, sql string
}

// sqlcheckStatements are the write path's own INSERT (the one the pg paths
// send, whose write latency is the denominator) and typical callers' ones.
var sqlcheckStatements = []sqlStatement{
	{"insert", insertSQL},
	{"upsert", "INSERT INTO jobs (id, state, payload, updated_at) VALUES ($1, $2, $3, now()) " +
		"ON CONFLICT (id) DO UPDATE SET state = excluded.state, payload = excluded.payload, updated_at = excluded.updated_at"},
	{"update-returning", "UPDATE jobs SET state = $2, updated_at = now() WHERE id = $1 RETURNING id, state, updated_at"},
	{"cte", "WITH claimed AS (SELECT id FROM jobs WHERE state = 'queued' ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED) " +
		"UPDATE jobs SET state = 'running', owner = $2 FROM claimed WHERE jobs.id = claimed.id"},
}

// sqlcheckFigures are one statement's check costs and what they add to a
// fenced write, as the JSON line's "sqlcheck" object.
type sqlcheckFigures struct {
	SQL         string  `json:"sql"`
	OldFilterNs float64 `json:"old_filter_ns"`
	CachedNs    float64 `json:"parser_cached_ns"`
	UncachedNs  float64 `json:"parser_uncached_ns"`
	// Parser over old filter, ns per check.
	CachedOverOld   float64 `json:"cached_over_old"`
	UncachedOverOld float64 `json:"uncached_over_old"`
	// (parser − old filter) / write p50, in percent.
	CachedAddedPct   float64 `json:"cached_added_pct_of_write"`
	UncachedAddedPct float64 `json:"uncached_added_pct_of_write"`
	GoalPct          float64 `json:"goal_pct"`
	WriteP50us       float64 `json:"write_p50_us"`
	WriteFrom        string  `json:"write_p50_from"`
	Rounds           int     `json:"rounds"`
}

// newSQLCheckResult is the result row of one statement, from the medians
// of its timings (ns per check) and the p50 of a fenced write.
func newSQLCheckResult(st sqlStatement, oldNs, cachedNs, uncachedNs, writeP50us float64, writeFrom string, rounds int) result {
	f := &sqlcheckFigures{
		SQL: st.sql, OldFilterNs: round1(oldNs), CachedNs: round1(cachedNs), UncachedNs: round1(uncachedNs),
		GoalPct: sqlcheckGoalPct, WriteP50us: writeP50us, WriteFrom: writeFrom, Rounds: rounds,
	}
	if oldNs > 0 {
		f.CachedOverOld = round2(cachedNs / oldNs)
		f.UncachedOverOld = round2(uncachedNs / oldNs)
	}
	if writeP50us > 0 {
		writeNs := writeP50us * 1000
		f.CachedAddedPct = round3(100 * (cachedNs - oldNs) / writeNs)
		f.UncachedAddedPct = round3(100 * (uncachedNs - oldNs) / writeNs)
	}
	return result{Scenario: "sqlcheck", Path: st.name, Clients: 1, SQLCheck: f}
}

// round3 rounds half away from zero: added costs may be negative.
func round3(f float64) float64 {
	if f < 0 {
		return -round3(-f)
	}
	return float64(int64(f*1000+0.5)) / 1000
}

// runSQLCheck times the old keyword filter and sqlcheck's Check, cached and
// uncached, on each statement, interleaved in rounds so that the machine's
// other load falls on all three alike, and sets them against the p50 of a
// fenced PostgreSQL write through fencegate in the same run.
func (b *bench) runSQLCheck(ctx context.Context) error {
	writeP50, from, err := b.sqlcheckWrite(ctx)
	if err != nil {
		return err
	}
	// The policy fencegate serve builds by default; only the cache differs.
	maxSleep := postgres.DefaultConfig().WriteTimeout
	cached, err := sqlcheck.New(sqlcheck.Config{MaxSleep: maxSleep})
	if err != nil {
		return err
	}
	uncached, err := sqlcheck.New(sqlcheck.Config{MaxSleep: maxSleep, CacheBytes: -1})
	if err != nil {
		return err
	}
	checks := [3]func(string) bool{
		func(s string) bool { return oldCheckStatement(s) == "" },
		func(s string) bool { _, err := cached.Check(s); return err == nil },
		func(s string) bool { _, err := uncached.Check(s); return err == nil },
	}
	names := [3]string{"the old filter", "the cached parser", "the parser"}
	for _, st := range sqlcheckStatements {
		for i, f := range checks {
			if !f(st.sql) { // also fills the cache: the steady state
				return fmt.Errorf("%s refuses the %s statement %q", names[i], st.name, st.sql)
			}
		}
	}
	rounds, per := 5, 400*time.Millisecond
	if b.cfg.quick {
		rounds, per = 3, 100*time.Millisecond
	}
	logf("sqlcheck: timing %d statements × 3 checks, %d rounds of %v each", len(sqlcheckStatements), rounds, per)
	ns := make([][3][]float64, len(sqlcheckStatements))
	for r := range rounds {
		for i, st := range sqlcheckStatements {
			for k := range checks {
				v := (k + r) % len(checks) // rotate which check goes first
				if err := ctx.Err(); err != nil {
					return err
				}
				x, err := nsPerCall(checks[v], st.sql, per)
				if err != nil {
					return fmt.Errorf("%s on the %s statement: %w", names[v], st.name, err)
				}
				ns[i][v] = append(ns[i][v], x)
			}
		}
	}
	for i, st := range sqlcheckStatements {
		r := newSQLCheckResult(st, median(ns[i][0]), median(ns[i][1]), median(ns[i][2]), writeP50, from, rounds)
		b.emit(r)
		f := r.SQLCheck
		logf("sqlcheck  %-16s old %7.1f ns  cached %7.1f ns (%.2f×)  uncached %8.1f ns (%.2f×)  added %.3f%% / %.3f%% of a %.1f µs write",
			st.name, f.OldFilterNs, f.CachedNs, f.CachedOverOld, f.UncachedNs, f.UncachedOverOld, f.CachedAddedPct, f.UncachedAddedPct, writeP50)
	}
	return nil
}

// sqlcheckWrite returns the p50 of a fenced PostgreSQL write through
// fencegate at one client: the load part's if it ran one, else measured
// here.
func (b *bench) sqlcheckWrite(ctx context.Context) (float64, string, error) {
	if x, ok := b.rep.find("distinct", pgGRPC, 1); ok && x.P50us > 0 {
		return x.P50us, "distinct pg-grpc, 1 client, this run's load part", nil
	}
	const fence = "bench-sqlcheck"
	l, err := b.campaign(ctx, fence, 30*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = l.Resign(context.WithoutCancel(ctx)) }()
	o := loadOpts{warmup: b.cfg.warmup, duration: b.cfg.duration, gatePID: b.env.gate.pid(), backendPID: b.env.backendPID(pgGRPC)}
	s, err := b.measure(ctx, pgGRPC, 1, []target{{fence: fence, token: l.Token()}}, false, o)
	if err != nil {
		return 0, "", err
	}
	r := summarise("sqlcheck-write", pgGRPC, 1, s, true)
	b.emit(r)
	logf("sqlcheck-write   1 client  %-20s %9.0f ops/s  p50 %7.1f µs  p99 %8.1f µs%s", pgGRPC, r.OpsPerSec, r.P50us, r.P99us, errNote(r))
	if r.P50us <= 0 {
		return 0, "", fmt.Errorf("no accepted write to take a p50 of (%d errors, %s)", r.Errors, r.Note)
	}
	return r.P50us, "sqlcheck-write pg-grpc, 1 client, measured by the sqlcheck part", nil
}

var errCheckRefused = errors.New("a check refused a statement it had accepted")

// nsPerCall returns the mean ns per f(sql) over about d, calling f in
// batches long enough that reading the clock costs nothing measurable.
func nsPerCall(f func(string) bool, sql string, d time.Duration) (float64, error) {
	batch, calls := 1, 0
	start := time.Now()
	for {
		t := time.Now()
		for range batch {
			if !f(sql) {
				return 0, errCheckRefused
			}
		}
		calls += batch
		el := time.Since(start)
		if el >= d {
			return float64(el) / float64(calls), nil
		}
		if time.Since(t) < 50*time.Microsecond {
			batch *= 2
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// sqlcheckRows are the sqlcheck part's rows, in statement order.
func (r *report) sqlcheckRows() []result {
	var out []result
	for _, x := range r.results {
		if x.SQLCheck != nil {
			out = append(out, x)
		}
	}
	return out
}

// sqlcheckWriteNote says what the added costs are a fraction of.
func sqlcheckWriteNote(f *sqlcheckFigures) string {
	return fmt.Sprintf("added = (parser − old filter) / p50 of a fenced PostgreSQL write through fencegate, %.1f µs (%s)", f.WriteP50us, f.WriteFrom)
}

func (r *report) printSQLCheck(w io.Writer) {
	rows := r.sqlcheckRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nsql check: ns per check, one goroutine, median of %d rounds; %s\n", rows[0].SQLCheck.Rounds, sqlcheckWriteNote(rows[0].SQLCheck))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "statement\told filter ns\tparser cached ns\t× old\tparser uncached ns\t× old\tcached added % of write\tuncached added % of write\t")
	for _, x := range rows {
		f := x.SQLCheck
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%.1f\t%.2f\t%.3f\t%.3f\t\n", x.Path, f.OldFilterNs, f.CachedNs, f.CachedOverOld,
			f.UncachedNs, f.UncachedOverOld, f.CachedAddedPct, f.UncachedAddedPct)
	}
	tw.Flush()
}

func (r *report) markdownSQLCheck(w io.Writer) {
	rows := r.sqlcheckRows()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| SQL check | old filter ns | parser cached ns | × old | parser uncached ns | × old | cached added % of write | uncached added % of write |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, x := range rows {
		f := x.SQLCheck
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.2f | %.1f | %.2f | %.3f | %.3f |\n", x.Path, f.OldFilterNs, f.CachedNs, f.CachedOverOld,
			f.UncachedNs, f.UncachedOverOld, f.CachedAddedPct, f.UncachedAddedPct)
	}
	fmt.Fprintf(w, "\nns per check in one goroutine, median of %d interleaved rounds; %s. Statements:\n\n", rows[0].SQLCheck.Rounds, sqlcheckWriteNote(rows[0].SQLCheck))
	for _, x := range rows {
		fmt.Fprintf(w, "- %s: `%s`\n", x.Path, x.SQLCheck.SQL)
	}
}

// sqlcheckGoals hold the parser's added cost, cached and uncached, on the
// write path's own statement against the goal; the value also gives the
// largest over all statements timed.
func (r *report) sqlcheckGoals() []goal {
	rows := r.sqlcheckRows()
	var gs []goal
	for _, cached := range []bool{true, false} {
		kind := "uncached (every statement parsed)"
		if cached {
			kind = "cached (the steady state)"
		}
		name := fmt.Sprintf("SQL check: parser %s − old filter ≤ %.0f %% of a fenced write's p50, %s statement", kind, sqlcheckGoalPct, sqlcheckStatements[0].name)
		added := func(f *sqlcheckFigures) float64 {
			if cached {
				return f.CachedAddedPct
			}
			return f.UncachedAddedPct
		}
		var own *sqlcheckFigures
		worst, worstName := 0.0, ""
		for _, x := range rows {
			if x.Path == sqlcheckStatements[0].name {
				own = x.SQLCheck
			}
			if a := added(x.SQLCheck); worstName == "" || a > worst {
				worst, worstName = a, x.Path
			}
		}
		if own == nil || own.WriteP50us <= 0 {
			gs = append(gs, goal{name: name, value: "not measured"})
			continue
		}
		parser := own.UncachedNs
		if cached {
			parser = own.CachedNs
		}
		v := fmt.Sprintf("%.3f %% ((%.1f − %.1f) ns over a %.1f µs write); largest of the %d statements %.3f %% (%s)",
			added(own), parser, own.OldFilterNs, own.WriteP50us, len(rows), worst, worstName)
		gs = append(gs, goal{name: name, value: v, state: check(added(own) <= sqlcheckGoalPct)})
	}
	return gs
}
