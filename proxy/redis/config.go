package redis

import (
	"crypto/tls"
	"fmt"
	"time"
)

// Config tunes a Backend. Zero fields take the value of DefaultConfig.
type Config struct {
	// PoolSize is the number of connections, which bounds the batches of
	// writes in flight (package coalesce): writes that arrive while every
	// connection is busy go out together on the next one free, one
	// pipeline. Default 4: Redis runs one script at a time, so more
	// connections add round trips and system calls, not throughput (on the
	// benchmark machine 4 did 1.46 times the writes of 20 at 64 clients and
	// 1.64 times at 16, docs/BENCHMARKS.md).
	PoolSize int
	// DialTimeout bounds establishing one connection. Default 5s.
	DialTimeout time.Duration
	// ReadTimeout and WriteTimeout bound each socket read and write, on top
	// of the ctx of each call. A script that runs longer than ReadTimeout is
	// reported as BACKEND_UNAVAILABLE with an unknown outcome. Default 3s.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// CheckSlots is ignored: every key must carry the fence's hash tag
	// {<fence>} (see the package doc), which puts it in the fence's
	// cluster slot whatever this says.
	//
	// Deprecated: keys are always bound to their fence by name.
	CheckSlots bool
	// Allow adds commands to the default allowlist. Only commands whose key
	// positions fencegate knows can be added (see the package doc); others,
	// and commands that reach another database (SELECT, MOVE, SWAPDB,
	// MIGRATE), fail Validate.
	Allow []string
	// MaxValueBytes bounds what one write may store in one value: every
	// argument of every command, and the string that SETRANGE, SETBIT or
	// APPEND would make. At most 512 MiB (Redis's own limit). Default 1 MiB,
	// the default request size of the API: a value no request could carry
	// cannot be grown to either, and every later write to a key copies it
	// whole for its rollback (DUMP), inside the script that holds the
	// server.
	MaxValueBytes int
	// MaxReplyBytes bounds the replies of one write, counted as the length
	// of every string in them plus 16 bytes per array element: a write
	// whose replies would be larger is rolled back and refused, and no
	// larger reply is read from the server. At least MaxValueBytes, so any
	// value can be read back. A reply that repeats elements (MGET naming a
	// key twice, SRANDMEMBER with a negative count, ...) is weighed before
	// sending, each repeat at MaxValueBytes plus 16 (see the package doc).
	// Default 4 MiB, or MaxValueBytes if that is larger.
	MaxReplyBytes int
	// TLS, when not nil, makes every connection TLS with this config (its
	// RootCAs, ServerName, and client certificate if the server asks for
	// one). Nil means plain TCP.
	TLS *tls.Config
	// Username and Password authenticate every connection (Redis 6 ACL;
	// an empty Username with a Password is the default user, requirepass).
	Username string
	Password string
	// EvictionCheck is how often the server's maxmemory-policy is read
	// again after Open: a policy changed at run time to allkeys-* makes
	// every write refused (BACKEND_UNAVAILABLE) and Ping fail until it is
	// changed back. Default 5s.
	EvictionCheck time.Duration
	// Leases, when set, names the lease keys of the fences whose terms
	// come from a Redis lease (--term-sources=...=redis-lease). Commands
	// may not name them; and when the lease is held in this same Redis
	// (not Elsewhere), the write checks it in the fenced script itself
	// (see Exec). ok false for every other fence, whose writes are
	// unchanged. It is called on every write, so it must be cheap; it
	// comes from configuration, never from a client.
	Leases func(fence string) (keys LeaseKeys, ok bool)
}

// LeaseKeys are a lease fence's keys: the lease (SET NX PX by its holder)
// and the counter (INCR on each acquisition: the token). Commands may not
// name either, in this Redis or not: whether two addresses are one Redis
// is not always known (localhost and 127.0.0.1), and writing them where
// the leases are would let a writer take a lease or forge a token.
type LeaseKeys struct {
	Lease, Counter string
	// Elsewhere: the lease is in another Redis, read before each write
	// (proxy.Options.ReadBeforeUse); the script does not check it.
	Elsewhere bool
}

// defaultPoolSize is DefaultConfig's PoolSize.
const defaultPoolSize = 4

// Limits of the size fields.
const (
	defaultMaxValueBytes = 1 << 20
	defaultMaxReplyBytes = 4 << 20
	// maxValueLimit is Redis's proto-max-bulk-len default, the largest
	// string Redis itself accepts.
	maxValueLimit = 512 << 20
	// maxReplyLimit: fencegate holds a whole reply in memory, twice over
	// (decoded, then encoded for the caller).
	maxReplyLimit = 1 << 30
)

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		PoolSize:      defaultPoolSize,
		DialTimeout:   5 * time.Second,
		ReadTimeout:   3 * time.Second,
		WriteTimeout:  3 * time.Second,
		CheckSlots:    true,
		MaxValueBytes: defaultMaxValueBytes,
		MaxReplyBytes: defaultMaxReplyBytes,
		EvictionCheck: 5 * time.Second,
	}
}

// withDefaults fills zero numeric fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.PoolSize == 0 {
		c.PoolSize = d.PoolSize
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = d.ReadTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.EvictionCheck == 0 {
		c.EvictionCheck = d.EvictionCheck
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = d.MaxValueBytes
	}
	if c.MaxReplyBytes == 0 {
		c.MaxReplyBytes = max(d.MaxReplyBytes, c.MaxValueBytes)
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.PoolSize < 1:
		return fmt.Errorf("redis: PoolSize must be at least 1, got %d", c.PoolSize)
	case c.DialTimeout < time.Millisecond:
		return fmt.Errorf("redis: DialTimeout must be at least 1ms, got %v", c.DialTimeout)
	case c.ReadTimeout < time.Millisecond:
		return fmt.Errorf("redis: ReadTimeout must be at least 1ms, got %v", c.ReadTimeout)
	case c.WriteTimeout < time.Millisecond:
		return fmt.Errorf("redis: WriteTimeout must be at least 1ms, got %v", c.WriteTimeout)
	case c.EvictionCheck < time.Millisecond:
		return fmt.Errorf("redis: EvictionCheck must be at least 1ms, got %v", c.EvictionCheck)
	case c.MaxValueBytes < 1 || c.MaxValueBytes > maxValueLimit:
		return fmt.Errorf("redis: MaxValueBytes must be between 1 and %d, got %d", maxValueLimit, c.MaxValueBytes)
	case c.MaxReplyBytes < c.MaxValueBytes || c.MaxReplyBytes > maxReplyLimit:
		return fmt.Errorf("redis: MaxReplyBytes must be between MaxValueBytes (%d) and %d, got %d", c.MaxValueBytes, maxReplyLimit, c.MaxReplyBytes)
	}
	_, err := newAllowlist(c.Allow)
	return err
}
