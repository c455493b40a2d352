package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Two policies that answer one question differently.
const (
	policyA = "rules:\n  - {name: a, principals: [w], fences: [f], actions: [sql.write], postgres_role: role_a}\n"
	policyB = "rules:\n" +
		"  - {name: b, principals: [w], fences: [f], actions: [sql.write], postgres_role: role_b}\n" +
		"  - {name: b2, principals: [v], fences: [f], actions: [fence.read]}\n"
	policyInvalid = "rules:\n  - {name: a, principals: [w], fences: [f], actions: [sql.wirte]}\n"
)

// logBuffer is a slog destination the test can read while a Store writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log's lines above INFO: the failures. (A successful
// reload logs one INFO line, "policy reloaded".)
func (b *logBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSuffix(b.buf.String(), "\n")
	if s == "" {
		return nil
	}
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "level=INFO") {
			out = append(out, l)
		}
	}
	return out
}

type storeFixture struct {
	path  string
	store *Store
	reg   *prometheus.Registry
	log   *logBuffer
}

func newStoreFixture(t *testing.T, initial string, opts StoreOptions) *storeFixture {
	t.Helper()
	f := &storeFixture{
		path: filepath.Join(t.TempDir(), "policy.yaml"),
		reg:  prometheus.NewRegistry(),
		log:  &logBuffer{},
	}
	f.write(t, initial)
	opts.Logger = slog.New(slog.NewTextHandler(f.log, nil))
	opts.Registerer = f.reg
	s, err := NewStore(f.path, opts)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	f.store = s
	return f
}

// write replaces the file the way editors and config management do: a new
// file renamed over the old, so a reader never sees half of it.
func (f *storeFixture) write(t *testing.T, doc string) {
	t.Helper()
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		t.Fatal(err)
	}
}

// role is what the policy in force answers for w writing f.
func (f *storeFixture) role() string {
	return f.store.Policy().Decide("w", "f", ActionSQLWrite).Role
}

type storeMetricValues struct {
	success, failure, valid, rules float64
}

func (f *storeFixture) metrics(t *testing.T) storeMetricValues {
	t.Helper()
	return storeMetricValues{
		success: testutil.ToFloat64(f.store.m.success),
		failure: testutil.ToFloat64(f.store.m.failure),
		valid:   testutil.ToFloat64(f.store.m.valid),
		rules:   testutil.ToFloat64(f.store.m.rules),
	}
}

func (f *storeFixture) wantMetrics(t *testing.T, want storeMetricValues) {
	t.Helper()
	if got := f.metrics(t); got != want {
		t.Errorf("metrics = %+v, want %+v", got, want)
	}
}

func TestStoreReload(t *testing.T) {
	f := newStoreFixture(t, policyA, StoreOptions{})
	if got, want := f.role(), "role_a"; got != want {
		t.Fatalf("role = %q, want %q", got, want)
	}
	f.wantMetrics(t, storeMetricValues{valid: 1, rules: 1})

	f.write(t, policyB)
	if err := f.store.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got, want := f.role(), "role_b"; got != want {
		t.Errorf("after an edit and Reload: role = %q, want %q", got, want)
	}
	f.wantMetrics(t, storeMetricValues{success: 1, valid: 1, rules: 2})

	f.write(t, policyInvalid)
	err := f.store.Reload()
	want := f.path + `: policy: rules[0] "a": actions: unknown action "sql.wirte" (want sql.write, redis.write, fence.read or fence.admin)`
	if got := errString(err); got != want {
		t.Errorf("Reload of an invalid file: error %q, want %q", got, want)
	}
	if got, want := f.role(), "role_b"; got != want {
		t.Errorf("after an invalid edit: role = %q, want %q (the old policy)", got, want)
	}
	f.wantMetrics(t, storeMetricValues{success: 1, failure: 1, valid: 0, rules: 2})
	lines := f.log.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "unknown action") || !strings.Contains(lines[0], f.path) {
		t.Errorf("log = %q, want one line naming the file and the error", lines)
	}

	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Reload of a removed file: error %v, want one matching os.ErrNotExist", err)
	}
	if got, want := f.role(), "role_b"; got != want {
		t.Errorf("after the file was removed: role = %q, want %q (the old policy)", got, want)
	}

	f.write(t, policyA)
	if err := f.store.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got, want := f.role(), "role_a"; got != want {
		t.Errorf("after a fixed edit: role = %q, want %q", got, want)
	}
	f.wantMetrics(t, storeMetricValues{success: 2, failure: 2, valid: 1, rules: 1})
}

func TestStoreRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStoreFixture(t, policyA, StoreOptions{Interval: time.Second})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- f.store.Run(ctx) }()
		// tick waits past the next poll and for the poll to finish.
		tick := func() {
			time.Sleep(time.Second)
			synctest.Wait()
		}

		tick()
		f.wantMetrics(t, storeMetricValues{valid: 1, rules: 1}) // unchanged: no reload

		f.write(t, policyB)
		tick()
		if got, want := f.role(), "role_b"; got != want {
			t.Errorf("after an edit: role = %q, want %q", got, want)
		}
		f.wantMetrics(t, storeMetricValues{success: 1, valid: 1, rules: 2})

		f.write(t, policyInvalid)
		for range 5 {
			tick()
		}
		if got, want := f.role(), "role_b"; got != want {
			t.Errorf("after an invalid edit: role = %q, want %q (the old policy)", got, want)
		}
		f.wantMetrics(t, storeMetricValues{success: 1, failure: 1, valid: 0, rules: 2})
		if lines := f.log.lines(); len(lines) != 1 {
			t.Errorf("log after 5 polls of one invalid file = %q, want one line", lines)
		}

		// SIGHUP on an unchanged invalid file tries again and says so again.
		if err := f.store.Reload(); err == nil {
			t.Errorf("Reload of the invalid file: nil error")
		}
		f.wantMetrics(t, storeMetricValues{success: 1, failure: 2, valid: 0, rules: 2})

		f.write(t, policyA)
		tick()
		if got, want := f.role(), "role_a"; got != want {
			t.Errorf("after a fixed edit: role = %q, want %q", got, want)
		}
		f.wantMetrics(t, storeMetricValues{success: 2, failure: 2, valid: 1, rules: 1})

		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	})
}

func TestStoreCheck(t *testing.T) {
	refuse := errors.New("role_b: refused by check")
	check := func(p *Policy) error {
		for _, r := range p.Roles() {
			if r == "role_b" {
				return refuse
			}
		}
		return nil
	}
	f := newStoreFixture(t, policyA, StoreOptions{Check: check})
	f.write(t, policyB)
	if err := f.store.Reload(); !errors.Is(err, refuse) {
		t.Errorf("Reload of a policy Check refuses: error %v, want %v", err, refuse)
	}
	if got, want := f.role(), "role_a"; got != want {
		t.Errorf("role = %q, want %q (the old policy)", got, want)
	}
	f.wantMetrics(t, storeMetricValues{failure: 1, valid: 0, rules: 1})

	if _, err := NewStore(f.path, StoreOptions{Check: check}); !errors.Is(err, refuse) {
		t.Errorf("NewStore with a policy Check refuses: error %v, want %v", err, refuse)
	}
}

// TestStoreRetry: a file Check could not decide on (the database did not
// answer) is tried again at every poll until it loads, reported once; one
// it refused, like an invalid one, waits for a change or a Reload.
func TestStoreRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := errors.New("database: timeout")
		var (
			mu      sync.Mutex
			down    bool // Check cannot decide
			refuse  bool // Check refuses role_b
			checked int  // Check calls for a policy with role_b
		)
		check := func(p *Policy) error {
			mu.Lock()
			defer mu.Unlock()
			if !slices.Contains(p.Roles(), "role_b") {
				return nil
			}
			checked++
			switch {
			case down:
				return fmt.Errorf("check roles: %w", unavailable)
			case refuse:
				return Refused(errors.New("role_b: unsafe"))
			}
			return nil
		}
		set := func(d, r bool) {
			mu.Lock()
			defer mu.Unlock()
			down, refuse, checked = d, r, 0
		}
		calls := func() int {
			mu.Lock()
			defer mu.Unlock()
			return checked
		}
		f := newStoreFixture(t, policyA, StoreOptions{Interval: time.Second, Check: check})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- f.store.Run(ctx) }()
		tick := func() {
			time.Sleep(time.Second)
			synctest.Wait()
		}

		// The database is down when policy B arrives: tried at every poll,
		// reported once, in force as soon as the database answers.
		set(true, false)
		f.write(t, policyB)
		for range 5 {
			tick()
		}
		if got, want := f.role(), "role_a"; got != want {
			t.Errorf("while Check cannot decide: role = %q, want %q (the old policy)", got, want)
		}
		if got, want := calls(), 5; got != want {
			t.Errorf("Check calls in 5 polls while it cannot decide = %d, want %d", got, want)
		}
		f.wantMetrics(t, storeMetricValues{failure: 1, valid: 0, rules: 1})
		if lines := f.log.lines(); len(lines) != 1 || !strings.Contains(lines[0], "retry=true") {
			t.Errorf("log after 5 polls that could not check = %q, want one line with retry=true", lines)
		}
		set(false, false)
		tick()
		if got, want := f.role(), "role_b"; got != want {
			t.Errorf("once Check decides: role = %q, want %q", got, want)
		}
		f.wantMetrics(t, storeMetricValues{success: 1, failure: 1, valid: 1, rules: 2})

		// A Reload (SIGHUP) that cannot check is tried again by Run too,
		// without a second line.
		f.write(t, policyA)
		tick()
		set(true, false)
		f.write(t, policyB)
		if err := f.store.Reload(); !errors.Is(err, unavailable) {
			t.Errorf("Reload while Check cannot decide: error %v, want %v", err, unavailable)
		}
		tick()
		f.wantMetrics(t, storeMetricValues{success: 2, failure: 2, valid: 0, rules: 1})
		set(false, false)
		tick()
		if got, want := f.role(), "role_b"; got != want {
			t.Errorf("after a Reload that could not check: role = %q, want %q", got, want)
		}
		f.wantMetrics(t, storeMetricValues{success: 3, failure: 2, valid: 1, rules: 2})

		// Refused: one try, one line, no retry even once Check would pass;
		// a Reload puts it in force.
		f.write(t, policyA)
		tick()
		set(false, true)
		f.write(t, policyB)
		for range 5 {
			tick()
		}
		if got, want := calls(), 1; got != want {
			t.Errorf("Check calls in 5 polls of a refused file = %d, want %d", got, want)
		}
		f.wantMetrics(t, storeMetricValues{success: 4, failure: 3, valid: 0, rules: 1})
		set(false, false)
		tick()
		if got, want := f.role(), "role_a"; got != want {
			t.Errorf("a refused file, unchanged: role = %q, want %q (not tried again)", got, want)
		}
		if err := f.store.Reload(); err != nil {
			t.Errorf("Reload once Check passes: %v", err)
		}
		if got, want := f.role(), "role_b"; got != want {
			t.Errorf("after Reload: role = %q, want %q", got, want)
		}

		// A file that cannot be read: reported once, then read at every
		// poll; the same content back loads again.
		if err := os.Remove(f.path); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			tick()
		}
		f.wantMetrics(t, storeMetricValues{success: 5, failure: 4, valid: 0, rules: 2})
		f.write(t, policyB)
		tick()
		f.wantMetrics(t, storeMetricValues{success: 6, failure: 4, valid: 1, rules: 2})

		lines := f.log.lines()
		wantRetry := []bool{true, true, false, true}
		if len(lines) != len(wantRetry) {
			t.Fatalf("log = %q, want %d lines", lines, len(wantRetry))
		}
		for i, l := range lines {
			if got := strings.Contains(l, "retry=true"); got != wantRetry[i] {
				t.Errorf("log line %d %q: retry=true %v, want %v", i, l, got, wantRetry[i])
			}
		}

		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	})
}

func TestRefused(t *testing.T) {
	cause := errors.New("role r: unsafe")
	err := Refused(cause)
	if !errors.Is(err, ErrRefused) || !errors.Is(err, cause) {
		t.Errorf("Refused(%v) = %v, want one matching ErrRefused and the cause", cause, err)
	}
	if got, want := errString(err), cause.Error(); got != want {
		t.Errorf("Refused(%v) reads %q, want %q", cause, got, want)
	}
	if err := Refused(nil); err != nil {
		t.Errorf("Refused(nil) = %v, want nil", err)
	}
}

func TestNewStoreErrors(t *testing.T) {
	dir := t.TempDir()
	invalid := filepath.Join(dir, "invalid.yaml")
	if err := os.WriteFile(invalid, []byte(policyInvalid), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	tests := []struct {
		name string
		path string
		opts StoreOptions
		want string
	}{
		{"missing", missing, StoreOptions{}, missing + ": policy: open: no such file or directory"},
		{"invalid", invalid, StoreOptions{}, invalid + `: policy: rules[0] "a": actions: unknown action "sql.wirte" (want sql.write, redis.write, fence.read or fence.admin)`},
		{"negative interval", invalid, StoreOptions{Interval: -time.Second}, "policy: interval -1s: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewStore(tt.path, tt.opts)
			if got := errString(err); got != tt.want {
				t.Errorf("NewStore error = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStoreMetricsRegistered(t *testing.T) {
	f := newStoreFixture(t, policyA, StoreOptions{})
	n, err := testutil.GatherAndCount(f.reg,
		"fencegate_policy_reloads_total", "fencegate_policy_valid",
		"fencegate_policy_rules", "fencegate_policy_last_reload_timestamp_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 { // two reload results, three gauges
		t.Errorf("series = %d, want 5", n)
	}
	if ts := testutil.ToFloat64(f.store.m.lastReload); ts < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last reload timestamp = %v, want about now", ts)
	}
}

// TestStoreDecideDuringReload has readers decide while the policy flips;
// every answer must come from one whole policy, and -race must stay quiet.
func TestStoreDecideDuringReload(t *testing.T) {
	f := newStoreFixture(t, policyA, StoreOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				p := f.store.Policy()
				d := p.Decide("w", "f", ActionSQLWrite)
				ok := d == Decision{Allowed: true, Rule: "a", Role: "role_a"} && p.Rules() == 1 ||
					d == Decision{Allowed: true, Rule: "b", Role: "role_b"} && p.Rules() == 2
				if !ok {
					errs <- "torn decision " + d.Rule + "/" + d.Role
					return
				}
			}
		})
	}
	for i := range 200 {
		doc := policyA
		if i%2 == 0 {
			doc = policyB
		}
		f.write(t, doc)
		if err := f.store.Reload(); err != nil {
			t.Errorf("Reload: %v", err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
