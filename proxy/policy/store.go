package policy

import (
	"context"
	"crypto/sha256"
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
	// it refuses is not put in force.
	Check func(*Policy) error
}

// Store holds the policy in force and replaces it when the file changes.
// Policy is a single atomic load, so readers never wait for a reload.
type Store struct {
	path     string
	log      *slog.Logger
	check    func(*Policy) error
	interval time.Duration
	cur      atomic.Pointer[Policy]
	m        storeMetrics

	mu   sync.Mutex // serializes loads (Reload and Run)
	seen [sha256.Size]byte
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
		path:     path,
		log:      opts.Logger,
		check:    opts.Check,
		interval: opts.Interval,
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
			Help: "1 when the last load of the policy file succeeded; 0 when the file is invalid and the previous policy is in force.",
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

	p, sum, err := s.load()
	if err != nil {
		return nil, err
	}
	s.install(p, sum)
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
// file cannot be read, is invalid, or Check refuses it, the policy in force
// stays, the error is returned, logged as one line and counted.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, sum, err := s.load()
	s.seen = sum
	if err != nil {
		s.fail(err)
		return err
	}
	s.install(p, sum)
	s.m.success.Inc()
	return nil
}

// Run checks the file every Interval and reloads it when its content
// changes, as Reload does. It returns nil when ctx is done.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.poll()
		}
	}
}

// poll reloads when the content differs from what was last tried, so an
// invalid file is reported once, not at every tick.
func (s *Store) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := s.read()
	var sum [sha256.Size]byte
	if err == nil {
		sum = sha256.Sum256(data)
	} else {
		// A file that cannot be read is one state of its own; the zero sum
		// stands for it.
		data = nil
	}
	if sum == s.seen {
		return
	}
	s.seen = sum
	if err == nil {
		var p *Policy
		if p, err = s.parse(data); err == nil {
			s.install(p, sum)
			s.m.success.Inc()
			return
		}
	}
	s.fail(err)
}

func (s *Store) load() (*Policy, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	data, err := s.read()
	if err != nil {
		return nil, sum, err
	}
	sum = sha256.Sum256(data)
	p, err := s.parse(data)
	return p, sum, err
}

func (s *Store) read() ([]byte, error) {
	return readFile(s.path)
}

func (s *Store) parse(data []byte) (*Policy, error) {
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	if s.check != nil {
		if err := s.check(p); err != nil {
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
	}
	return p, nil
}

func (s *Store) install(p *Policy, sum [sha256.Size]byte) {
	if old := s.cur.Swap(p); old != nil {
		s.log.Info("policy reloaded", "file", s.path, "rules", p.Rules())
	}
	s.seen = sum
	s.m.valid.Set(1)
	s.m.rules.Set(float64(p.Rules()))
	s.m.lastReload.Set(float64(time.Now().UnixNano()) / 1e9)
}

func (s *Store) fail(err error) {
	s.m.failure.Inc()
	s.m.valid.Set(0)
	s.log.Error("policy: reload failed; the previous policy stays in force",
		"rules", s.cur.Load().Rules(), "err", err) // err names the file
}

// Decide decides with the policy in force; a Store is the gateway's
// proxy.Authorizer.
func (s *Store) Decide(principal, fence string, a Action) Decision {
	return s.Policy().Decide(principal, fence, a)
}
