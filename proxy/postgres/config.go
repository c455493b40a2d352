package postgres

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Config tunes a Backend. Zero fields take the value of DefaultConfig.
type Config struct {
	// MaxConns is the size of the connection pool, which bounds the
	// concurrent writes. Default 4 × GOMAXPROCS, at least 4.
	MaxConns int32
	// StatementTimeout is the server-side statement_timeout of every
	// connection, set at connect time so it costs no round trip. It bounds
	// each statement of a write, including the wait for the fence row lock.
	// Default 5s.
	StatementTimeout time.Duration
	// WriteTimeout bounds a whole write, all its statements and its commit,
	// from when PostgreSQL starts it: past it, fencegate cancels the
	// statement running and the write rolls back. Default 5s (zero in a
	// Config: its StatementTimeout).
	WriteTimeout time.Duration
	// ConnectTimeout bounds establishing one connection. Default 5s.
	ConnectTimeout time.Duration
	// MaxResultRows and MaxResultBytes bound what one write's statements
	// may return together (bytes as PostgreSQL stores the rows). The
	// database checks them before the write commits: the statement that
	// goes over either fails, and the write rolls back. Defaults 10000 rows
	// and 4 MiB.
	MaxResultRows  int64
	MaxResultBytes int64
	// AllowSQL widens the statements callers may send beyond SELECT,
	// INSERT, UPDATE, DELETE and MERGE, by the names of sqlcheck.AllowNames
	// ("truncate", "lock", "ddl"). What would break the fence stays refused.
	AllowSQL []string
	// TermCheck, when set, names the fences whose term source is
	// postgres-term and their check: their writes start with
	// fencegate.advance_term instead of fencegate.advance, in the same
	// statement and round trip. Called on every write: it must be cheap.
	TermCheck func(fence string) (TermCheck, bool)
	// ApplicationName is reported to the server (pg_stat_activity).
	// Default "fencegate".
	ApplicationName string
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		MaxConns:         max(4, 4*int32(runtime.GOMAXPROCS(0))),
		StatementTimeout: 5 * time.Second,
		WriteTimeout:     5 * time.Second,
		MaxResultRows:    10000,
		MaxResultBytes:   4 << 20,
		ConnectTimeout:   5 * time.Second,
		ApplicationName:  "fencegate",
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxConns == 0 {
		c.MaxConns = d.MaxConns
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = d.StatementTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = c.StatementTimeout
	}
	if c.MaxResultRows == 0 {
		c.MaxResultRows = d.MaxResultRows
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = d.MaxResultBytes
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.ApplicationName == "" {
		c.ApplicationName = d.ApplicationName
	}
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.MaxConns < 1:
		return fmt.Errorf("postgres: MaxConns must be at least 1, got %d", c.MaxConns)
	case c.StatementTimeout < time.Millisecond:
		return fmt.Errorf("postgres: StatementTimeout must be at least 1ms, got %v", c.StatementTimeout)
	case c.WriteTimeout < time.Millisecond:
		return fmt.Errorf("postgres: WriteTimeout must be at least 1ms, got %v", c.WriteTimeout)
	case c.MaxResultRows < 1:
		return fmt.Errorf("postgres: MaxResultRows must be at least 1, got %d", c.MaxResultRows)
	case c.MaxResultBytes < 1:
		return fmt.Errorf("postgres: MaxResultBytes must be at least 1, got %d", c.MaxResultBytes)
	case c.ConnectTimeout < time.Millisecond:
		return fmt.Errorf("postgres: ConnectTimeout must be at least 1ms, got %v", c.ConnectTimeout)
	case c.ApplicationName == "":
		return errors.New("postgres: ApplicationName must not be empty")
	}
	return nil
}
