package sqlcheck

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

const (
	cacheShards = 16
	// entryOverhead approximates what an entry costs beside its key: the
	// entry, its map slot and ring slot, and a refusal's strings.
	entryOverhead = 160
)

// cache holds verdicts by SQL text, bounded by bytes. It is sharded by a
// hash of the text; each shard evicts by CLOCK, so a hit only takes a read
// lock and sets a bit, and allocates nothing.
type cache struct {
	seed   maphash.Seed
	shards [cacheShards]shard
}

type shard struct {
	mu     sync.RWMutex
	m      map[string]*entry
	ring   []*entry // CLOCK order, give or take the swaps of eviction
	hand   int
	bytes  int
	budget int
	_      [64]byte // keeps shards' locks off each other's cache lines
}

type entry struct {
	key  string
	st   Statement
	err  error
	size int
	used atomic.Bool
}

func newCache(bytes int) *cache {
	c := &cache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = map[string]*entry{}
		c.shards[i].budget = bytes / cacheShards
	}
	return c
}

func (c *cache) shard(sql string) *shard {
	return &c.shards[maphash.String(c.seed, sql)%cacheShards]
}

func (c *cache) get(sql string) (Statement, bool, error) {
	s := c.shard(sql)
	s.mu.RLock()
	e := s.m[sql]
	s.mu.RUnlock()
	if e == nil {
		return Statement{}, false, nil
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e.st, true, e.err
}

// put stores a verdict. st.Text and a refusal's strings must not share
// memory with anything but key.
func (c *cache) put(key string, st Statement, err error) {
	e := &entry{key: key, st: st, err: err, size: len(key) + entryOverhead}
	if r, ok := err.(*Refusal); ok { //nolint:errorlint // check returns only its own unwrapped *Refusal; no errors.As allocation here
		e.size += len(r.What) + len(r.Why)
	}
	s := c.shard(key)
	if e.size > s.budget {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; ok {
		return
	}
	for s.bytes+e.size > s.budget {
		s.evict()
	}
	s.m[key] = e
	s.ring = append(s.ring, e)
	s.bytes += e.size
}

// evict drops one entry not used since the hand last passed it.
func (s *shard) evict() {
	for {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		e := s.ring[s.hand]
		if e.used.Load() {
			e.used.Store(false)
			s.hand++
			continue
		}
		last := len(s.ring) - 1
		s.ring[s.hand] = s.ring[last]
		s.ring[last] = nil
		s.ring = s.ring[:last]
		delete(s.m, e.key)
		s.bytes -= e.size
		return
	}
}
