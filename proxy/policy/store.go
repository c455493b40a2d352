package policy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultInterval is how often Store.Run looks at the policy file when
// StoreOptions.Interval is zero.
const DefaultInterval = time.Second

// StoreOptions configure a Store.
type StoreOptions struct {
	// Logger receives one line per failed reload. Nil discards.
	Logger *slog.Logger
	// Registerer receives the policy metrics. Nil registers nothing.
	Registerer prometheus.Registerer
	// Interval is how often Run checks the file; zero means DefaultInterval.
	Interval time.Duration
	// Check is extra validation by the caller (roles against the database
	// login, say), applied to the first policy and to every reload. A policy
	// it fails is not put in force. An error wrapping ErrRefused (see
	// Refused) refuses the policy itself, like a parse error: Run tries that
	// file again only once its content changes. Any other error means Check
	// could not decide (the database did not answer), and Run tries the same
	// file again at every poll until it loads.
	Check func(*Policy) error
	// FileCheck, when set, judges the file before each read (its mode,
	// say). An error refuses the file as one that cannot be read: the
	// first load fails with it, a reload keeps the policy in force, and
	// Run tries again at every check, so a file made acceptable (chmod) is
	// loaded without a change to its content.
	FileCheck func(path string) error
}

// ErrRefused marks an error of StoreOptions.Check that refuses the policy
// itself, as opposed to one that says Check could not decide.
var ErrRefused = errors.New("policy: refused")

// Refused returns err marked as Check's refusal of the policy: it matches
// ErrRefused and err through errors.Is, and reads as err.
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return refusedError{err}
}

type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{ErrRefused, e.err} }

// failure is why a load did not put its file in force.
type failure int

const (
	// invalid: the content is refused (it does not parse, or Check refused
	// it). Trying the same content again would fail the same way.
	invalid failure = iota + 1
	// unreadable: the file could not be read (removed, a mount gone).
	unreadable
	// unchecked: Check could not decide (the database did not answer).
	unchecked
)

// retry reports whether the same content may load when tried again.
func (f failure) retry() bool { return f == unreadable || f == unchecked }

// attempt is one load of the file.
type attempt struct {
	sum [sha256.Size]byte // of the content; zero when it could not be read
	p   *Policy           // nil unless it loaded
	err error
	why failure // of err
}

// Store holds the policy in force and replaces it when the file changes.
// Policy is a single atomic load, so readers never wait for a reload.
type Store struct {
	path      string
	log       *slog.Logger
	check     func(*Policy) error
	fileCheck func(path string) error
	interval  time.Duration
	cur       atomic.Pointer[Policy]
	m         storeMetrics

	mu   sync.Mutex        // serializes loads (Reload and Run)
	seen [sha256.Size]byte // content last tried (zero: unreadable)
	last failure           // why seen did not load; 0 when it did
}

type storeMetrics struct {
	success, failure prometheus.Counter
	valid, rules     prometheus.Gauge
	lastReload       prometheus.Gauge
}

// NewStore loads the policy at path; that first load must succeed.
func NewStore(path string, opts StoreOptions) (*Store, error) {
	if opts.Interval < 0 {
		return nil, fmt.Errorf("policy: interval %v: must not be negative", opts.Interval)
	}
	s := &Store{
		path:      path,
		log:       opts.Logger,
		check:     opts.Check,
		fileCheck: opts.FileCheck,
		interval:  opts.Interval,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.interval == 0 {
		s.interval = DefaultInterval
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_policy_reloads_total",
		Help: "Policy file loads after the first, by result.",
	}, []string{"result"})
	s.m = storeMetrics{
		success: reloads.WithLabelValues("success"),
		failure: reloads.WithLabelValues("failure"),
		valid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_policy_valid",
			Help: "1 when the last load of the policy file succeeded; 0 when it failed and the previous policy is in force.",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_policy_rules",
			Help: "Rules in the policy in force.",
		}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_policy_last_reload_timestamp_seconds",
			Help: "When the policy in force was loaded, in seconds since the Unix epoch.",
		}),
	}

	a := s.try(s.read())
	if a.err != nil {
		return nil, a.err
	}
	s.install(a)
	if r := opts.Registerer; r != nil {
		for _, c := range []prometheus.Collector{reloads, s.m.valid, s.m.rules, s.m.lastReload} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("policy: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Policy returns the policy in force.
func (s *Store) Policy() *Policy {
	return s.cur.Load()
}

// Reload re-reads the file (on SIGHUP, say) and puts it in force. If the
// file cannot be read, is invalid, or Check fails it, the policy in force
// stays, the error is returned, logged as one line and counted. A failure
// that may pass (see StoreOptions.Check) is tried again by Run.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.try(s.read())
	s.settle(a, true)
	return a.err
}

// Run checks the file every Interval and reloads it when its content
// changes, as Reload does; content that failed for a reason that may pass
// (the file could not be read, Check could not decide) is tried again at
// every check until it loads. It returns nil when ctx is done.
func (s *Store) Run(ctx context.Context) error {
	// A timer set after each poll, not a ticker: a poll that waited for a
	// database that does not answer is followed by a whole Interval.
	t := time.NewTimer(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.poll()
			t.Reset(s.interval)
		}
	}
}

// poll reloads when the content differs from what was last tried, or when
// the last try failed for a reason that may pass. A failure is reported
// (logged and counted) once: a retry failing as the try before it did says
// nothing new, so an invalid file or a database down is one line, not one
// per poll.
func (s *Store) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, sum, err := s.read()
	if sum == s.seen && !s.last.retry() {
		return
	}
	a := s.try(data, sum, err)
	s.settle(a, a.sum != s.seen || a.why != s.last)
}

// read reads the file and sums its content; the zero sum stands for a file
// that cannot be read.
func (s *Store) read() ([]byte, [sha256.Size]byte, error) {
	if s.fileCheck != nil {
		if err := s.fileCheck(s.path); err != nil {
			return nil, [sha256.Size]byte{}, err
		}
	}
	data, err := readFile(s.path)
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	return data, sha256.Sum256(data), nil
}

// try loads what read returned. It is the one place that decides whether a
// failure may pass with the same content.
func (s *Store) try(data []byte, sum [sha256.Size]byte, readErr error) attempt {
	if readErr != nil {
		return attempt{err: readErr, why: unreadable}
	}
	a := attempt{sum: sum}
	p, err := Parse(data)
	if err != nil {
		a.err, a.why = fmt.Errorf("%s: %w", s.path, err), invalid
		return a
	}
	if s.check != nil {
		if err := s.check(p); err != nil {
			a.err, a.why = fmt.Errorf("%s: %w", s.path, err), unchecked
			if errors.Is(err, ErrRefused) {
				a.why = invalid
			}
			return a
		}
	}
	a.p = p
	return a
}

// settle records a reload's outcome: a is put in force, or the policy in
// force stays and, if report, the failure is logged and counted.
func (s *Store) settle(a attempt, report bool) {
	if a.err == nil {
		s.install(a)
		s.m.success.Inc()
		return
	}
	s.seen, s.last = a.sum, a.why
	s.m.valid.Set(0)
	if !report {
		return
	}
	s.m.failure.Inc()
	attrs := []any{"rules", s.cur.Load().Rules(), "err", a.err} // err names the file
	if a.why.retry() {
		attrs = append(attrs, "retry", true) // at every poll, silently, until it loads
	}
	s.log.Error("policy: reload failed; the previous policy stays in force", attrs...)
}

func (s *Store) install(a attempt) {
	if old := s.cur.Swap(a.p); old != nil {
		s.log.Info("policy reloaded", "file", s.path, "rules", a.p.Rules())
	}
	s.seen, s.last = a.sum, 0
	s.m.valid.Set(1)
	s.m.rules.Set(float64(a.p.Rules()))
	s.m.lastReload.Set(float64(time.Now().UnixNano()) / 1e9)
}

// Decide decides with the policy in force; a Store is the gateway's
// proxy.Authorizer.
func (s *Store) Decide(principal, fence string, a Action) Decision {
	return s.Policy().Decide(principal, fence, a)
}
