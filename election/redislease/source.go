package redislease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/election"
)

// Defaults of Config.
const (
	DefaultKeyPattern     = "lease:%s"
	DefaultCounterPattern = "lease:%s:token"
	DefaultPollInterval   = time.Second
	// DefaultMaxFences bounds the fences Run polls.
	DefaultMaxFences = 10000
)

// Config configures a Source. Zero fields take the defaults above.
type Config struct {
	// KeyPattern names fence F's lease key, CounterPattern its counter:
	// each holds exactly one %s, replaced by F. A hash tag in a pattern,
	// if any, must be {%s}, so that no other fence's client can name the
	// key through fencegate (see ValidatePattern); and no fence's lease
	// key may be a fence's counter key (see ValidatePatterns).
	KeyPattern     string
	CounterPattern string
	// PollInterval is how often Run re-reads the fences it knows.
	PollInterval time.Duration
	// MaxFences bounds the fences Run polls (memory and Redis load);
	// past it, new fences are answered by Verify but not polled.
	MaxFences int
	// Logger receives poll failures and term changes. Nil discards them.
	Logger *slog.Logger
}

// ValidatePattern checks a key pattern: exactly one %s and no other
// verb, and a hash tag, if the key has one, that is the fence's own
// {%s}. The error names what is wrong, prefixed by what.
func ValidatePattern(what, pattern string) error {
	if strings.Count(pattern, "%s") != 1 || strings.Count(pattern, "%") != 1 {
		return fmt.Errorf("redislease: %s %q: want exactly one %%s (the fence name) and no other %%", what, pattern)
	}
	if i := strings.IndexByte(pattern, '{'); i >= 0 {
		j := strings.IndexByte(pattern[i:], '}')
		if j >= 0 && j > 1 && pattern[i:i+j+1] != "{%s}" {
			return fmt.Errorf("redislease: %s %q: its hash tag must be {%%s}, the fence's own, or another fence's clients could name the key", what, pattern)
		}
	}
	return nil
}

// Keys are a fence's lease key and counter key.
type Keys struct {
	Lease, Counter string
}

// Source is the redis-lease term source. It is safe for concurrent use.
type Source struct {
	client     goredis.UniversalClient
	keyPat     string
	counterPat string
	interval   time.Duration
	maxFences  int
	log        *slog.Logger

	// reads numbers the reads of Redis as they start; seen is, for each
	// fence polled, the number of the read memory holds (guarded by mu).
	reads atomic.Uint64

	mu    sync.RWMutex
	terms map[string]election.Term // fences polled, guarded by mu
	keys  map[string]Keys          // of the fences polled, guarded by mu
	seen  map[string]uint64        // of the fences polled, guarded by mu
	// highs are the highest counter each fence polled was read at;
	// floors, for fences whose counter was seen going back (the lease's
	// Redis lost its keys), the highest token handed out before: INCR
	// hands those out again, so no holder of one is a leader (record).
	// Guarded by mu.
	highs, floors map[string]int64
}

// read is one read of a fence's keys: its number, and the highest counter
// of the reads that had finished as it started (Source.highs).
type read struct {
	seq  uint64
	high int64
}

// startRead numbers a read of fence name about to be sent.
func (s *Source) startRead(name string) read {
	s.mu.RLock()
	high := s.highs[name]
	s.mu.RUnlock()
	return read{seq: s.reads.Add(1), high: high}
}

// New returns a Source reading leases through client, which it does not
// close. It does not contact Redis; Verify and Run do.
func New(client goredis.UniversalClient, cfg Config) (*Source, error) {
	if client == nil {
		return nil, errors.New("redislease: nil Redis client")
	}
	if cfg.KeyPattern == "" {
		cfg.KeyPattern = DefaultKeyPattern
	}
	if cfg.CounterPattern == "" {
		cfg.CounterPattern = DefaultCounterPattern
	}
	if err := ValidatePatterns("key pattern", cfg.KeyPattern, "counter pattern", cfg.CounterPattern); err != nil {
		return nil, err
	}
	switch {
	case cfg.PollInterval < 0:
		return nil, fmt.Errorf("redislease: negative PollInterval %v", cfg.PollInterval)
	case cfg.PollInterval == 0:
		cfg.PollInterval = DefaultPollInterval
	}
	switch {
	case cfg.MaxFences < 0:
		return nil, fmt.Errorf("redislease: negative MaxFences %d", cfg.MaxFences)
	case cfg.MaxFences == 0:
		cfg.MaxFences = DefaultMaxFences
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Source{
		client: client, keyPat: cfg.KeyPattern, counterPat: cfg.CounterPattern,
		interval: cfg.PollInterval, maxFences: cfg.MaxFences, log: cfg.Logger,
		terms: map[string]election.Term{}, keys: map[string]Keys{}, seen: map[string]uint64{},
		highs: map[string]int64{}, floors: map[string]int64{},
	}, nil
}

// Keys are fence's lease and counter keys. Those of a fence polled are
// kept: no allocation on the write path.
func (s *Source) Keys(fence string) Keys {
	s.mu.RLock()
	k, ok := s.keys[fence]
	s.mu.RUnlock()
	if ok {
		return k
	}
	return Keys{Lease: fmt.Sprintf(s.keyPat, fence), Counter: fmt.Sprintf(s.counterPat, fence)}
}

// Term is fence's term as last read; the zero Term for a fence never
// read. Memory only.
func (s *Source) Term(name string) election.Term {
	s.mu.RLock()
	t, ok := s.terms[name]
	s.mu.RUnlock()
	if !ok {
		return election.Term{Election: name}
	}
	return t
}

// Terms are the terms of the fences polled, by name.
func (s *Source) Terms() []election.Term {
	s.mu.RLock()
	out := slices.AppendSeq(make([]election.Term, 0, len(s.terms)), maps.Values(s.terms))
	s.mu.RUnlock()
	slices.SortFunc(out, election.CompareTerms)
	return out
}

// readScript reads a fence's lease and counter at one moment: both GETs
// in one script run. (MULTI/EXEC would do, but not inside a pipeline.)
const readScript = `return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}`

// Verify reads fence name's lease and counter now, in one script run.
// held reports whether token was ever handed out: at most the counter.
// The term is the one read, whatever memory holds: after the lease Redis
// lost its keys (FLUSHALL, a restart without persistence) the counter
// starts again below tokens handed out before, and the lease they held is
// gone. An error means Redis did not answer, or the counter holds no
// token.
func (s *Source) Verify(ctx context.Context, name string, token int64) (election.Term, bool, error) {
	k := s.Keys(name)
	r := s.startRead(name)
	res, err := s.client.Eval(ctx, readScript, []string{k.Lease, k.Counter}).Result()
	if err != nil {
		return election.Term{Election: name}, false, fmt.Errorf("redislease: read the lease of %q: %w", name, err)
	}
	t, err := s.fold(name, k, res, r)
	if err != nil {
		return election.Term{Election: name}, false, err
	}
	return t, t.Last > 0 && token <= t.Last, nil
}

// fold turns readScript's reply, to read r, into the
// fence's term, records it when a counter exists (or the fence is polled
// already), and returns it.
func (s *Source) fold(name string, k Keys, res any, r read) (election.Term, error) {
	pair, ok := res.([]any)
	if !ok || len(pair) != 2 {
		return election.Term{}, fmt.Errorf("redislease: unexpected reply %.100v reading %s and %s", res, k.Lease, k.Counter)
	}
	if pair[1] == nil {
		// No term was ever handed out, or the keys were lost: nothing
		// to poll for a fence not polled yet, no leader for one that is.
		t := election.Term{Election: name}
		s.mu.RLock()
		_, polled := s.terms[name]
		s.mu.RUnlock()
		if polled {
			t = s.record(t, r)
		}
		return t, nil
	}
	raw, _ := pair[1].(string)
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 1 {
		return election.Term{}, fmt.Errorf("redislease: %s holds %.32q, not a token", k.Counter, raw)
	}
	t := election.Term{Election: name, Last: n}
	if holder, ok := pair[0].(string); ok {
		t.Rev, t.Leader = n, holder
	}
	return s.record(t, r), nil
}

// record stores t, found by read r, as name's term unless memory holds
// what a read started later found (reads may finish out of order), and
// returns t as the source answers it. It orders reads by their start, not
// by the counter: a counter lower than memory's (or gone) is the lease
// Redis starting again, which a read started later sees.
//
// A counter below one a read that had finished before r started saw
// (r.high) went back for certain: Redis ran r after that read. INCR then
// hands out the tokens of before a second time, so from then on a token
// up to the highest one handed out before is no leader's, whoever holds
// the lease (its holder's writes are TERM_ENDED): as the etcd watcher
// treats a restored etcd. Leaders campaign past it. (Two reads in flight
// at once may run in either order, so memory's term alone proves
// nothing.)
func (s *Source) record(t election.Term, r read) election.Term {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.terms[t.Election]
	floor := s.floors[t.Election]
	if t.Last < r.high && r.high > floor { // once per loss, not per poll until the counter passes it
		floor = r.high
		s.floors[t.Election] = floor
		s.log.Warn("redis-lease counter went back (its Redis lost the keys: a restart without persistence, FLUSHALL, eviction): "+
			"the tokens up to the highest handed out before are handed out again and are refused TERM_ENDED; leaders holding one must campaign again",
			"election", t.Election, "counter", t.Last, "was", r.high, "refused_up_to", floor, "source", election.SourceRedisLease)
	}
	if t.Rev != 0 && t.Rev <= floor {
		t.Rev, t.Leader = 0, ""
	}
	if !ok {
		if len(s.terms) >= s.maxFences {
			return t
		}
		s.keys[t.Election] = Keys{Lease: fmt.Sprintf(s.keyPat, t.Election), Counter: fmt.Sprintf(s.counterPat, t.Election)}
	}
	s.highs[t.Election] = max(s.highs[t.Election], t.Last)
	if ok && s.seen[t.Election] > r.seq {
		return t
	}
	if old.Rev != t.Rev || old.Leader != t.Leader {
		t.Changes = old.Changes + 1
		s.log.Info("term changed", "election", t.Election, "term", t.Rev, "leader", t.Leader,
			"previous_term", old.Rev, "has_leader", t.HasLeader(), "source", election.SourceRedisLease)
	} else {
		t.Changes = old.Changes
	}
	s.terms[t.Election] = t
	s.seen[t.Election] = r.seq
	return t
}

// Run polls the known fences every PollInterval until ctx ends, and
// returns ctx's error. A failed poll is logged and retried next interval.
func (s *Source) Run(ctx context.Context) error {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := s.Poll(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("redis-lease poll failed", "err", err)
		}
	}
}

// Poll re-reads every known fence's lease and counter once, in one
// pipeline.
func (s *Source) Poll(ctx context.Context) error {
	s.mu.RLock()
	names := slices.Collect(maps.Keys(s.terms))
	highs := make([]int64, len(names))
	for i, name := range names {
		highs[i] = s.highs[name]
	}
	s.mu.RUnlock()
	if len(names) == 0 {
		return nil
	}
	keys := make([]Keys, len(names))
	cmds := make([]*goredis.Cmd, len(names))
	seq := s.reads.Add(1)
	pctx, cancel := context.WithTimeout(ctx, max(s.interval, time.Second))
	defer cancel()
	// Each command's error is its own (Pipelined returns the first):
	// one fence whose keys cannot be read must not keep the others'
	// memory from being refreshed.
	_, _ = s.client.Pipelined(pctx, func(p goredis.Pipeliner) error {
		for i, name := range names {
			keys[i] = s.Keys(name)
			cmds[i] = p.Eval(pctx, readScript, []string{keys[i].Lease, keys[i].Counter})
		}
		return nil
	})
	var first error
	for i, name := range names {
		err := cmds[i].Err()
		if err == nil {
			_, err = s.fold(name, keys[i], cmds[i].Val(), read{seq: seq, high: highs[i]})
		} else {
			err = fmt.Errorf("redislease: poll %q: %w", name, err)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}
