package redis

import (
	"fmt"
	"runtime"
	"time"
)

// Config tunes a Backend. Zero durations and sizes take the value of
// DefaultConfig; CheckSlots is a bool and is taken as given, so start from
// DefaultConfig() to keep it on.
type Config struct {
	// PoolSize is the number of connections, which bounds the concurrent
	// writes. Default 10 × GOMAXPROCS.
	PoolSize int
	// DialTimeout bounds establishing one connection. Default 5s.
	DialTimeout time.Duration
	// ReadTimeout and WriteTimeout bound each socket read and write, on top
	// of the ctx of each call. A script that runs longer than ReadTimeout is
	// reported as BACKEND_UNAVAILABLE with an unknown outcome. Default 3s.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// CheckSlots refuses requests with keys outside the Redis Cluster hash
	// slot of the fence's token key, so they would also work on a cluster
	// (see the package doc). On in DefaultConfig.
	CheckSlots bool
	// Allow adds commands to the default allowlist. Only commands whose key
	// positions fencegate knows can be added (see the package doc); others
	// fail Validate.
	Allow []string
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		PoolSize:     10 * runtime.GOMAXPROCS(0),
		DialTimeout:  5 * time.Second,
		ReadTimeout:  3 * time.Second,
		WriteTimeout: 3 * time.Second,
		CheckSlots:   true,
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
	}
	_, err := newAllowlist(c.Allow)
	return err
}
