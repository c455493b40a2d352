package proxy

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fencegate/fencegate/election"
)

// Config holds the pipeline's request limits.
type Config struct {
	// MaxStatements is the most statements (or commands) in one write.
	MaxStatements int
	// MaxParams is the most parameters of one statement.
	MaxParams int
	// MaxFenceName is the longest fence name accepted, in bytes.
	MaxFenceName int
	// VerifyTimeout bounds the linearizable etcd read that checks a token
	// above everything this replica knows.
	VerifyTimeout time.Duration
	// VerifyRate and VerifyBurst are each fence's token bucket for those
	// reads: at most VerifyBurst at once, refilled at VerifyRate a second.
	// Each such token is a new leader the watch has not delivered yet or a
	// forgery; past the bucket, writes are refused with OVERLOADED.
	VerifyRate  float64
	VerifyBurst int
	// VerifyFences bounds the fences with a bucket of their own (memory);
	// fences beyond it share one bucket of the same size.
	VerifyFences int
	// MaxInFlight bounds each backend's writes between admission and
	// answer, and apart from them its writes waiting for an etcd read
	// of their term before use (a redis-lease fence, or a watch lost);
	// past it writes are refused with OVERLOADED.
	MaxInFlight int
	// PolicyShadow serves what the policy would refuse, logging and
	// counting it instead (--policy-mode=shadow), to try a policy out.
	PolicyShadow bool
}

// DefaultConfig returns the limits fencegate serves with unless told
// otherwise.
func DefaultConfig() Config {
	return Config{
		MaxStatements: 64,
		MaxParams:     1024,
		MaxFenceName:  128,
		VerifyTimeout: 2 * time.Second,
		VerifyRate:    10,
		VerifyBurst:   20,
		VerifyFences:  10000,
		MaxInFlight:   2048,
	}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.MaxStatements < 1:
		return fmt.Errorf("proxy: max statements must be at least 1, got %d", c.MaxStatements)
	case c.MaxParams < 0 || c.MaxParams > 65535:
		return fmt.Errorf("proxy: max params must be in [0, 65535], got %d", c.MaxParams)
	case c.MaxFenceName < 1 || c.MaxFenceName > 1024:
		return fmt.Errorf("proxy: max fence name must be in [1, 1024], got %d", c.MaxFenceName)
	case c.VerifyTimeout <= 0:
		return errors.New("proxy: verify timeout must be positive")
	case !(c.VerifyRate > 0) || math.IsInf(c.VerifyRate, 0):
		return fmt.Errorf("proxy: verify rate must be a positive number of reads a second, got %v", c.VerifyRate)
	case c.VerifyBurst < 1:
		return fmt.Errorf("proxy: verify burst must be at least 1, got %d", c.VerifyBurst)
	case c.VerifyFences < 1:
		return fmt.Errorf("proxy: verify fences must be at least 1, got %d", c.VerifyFences)
	case c.MaxInFlight < 1:
		return fmt.Errorf("proxy: max in-flight writes must be at least 1, got %d", c.MaxInFlight)
	}
	return nil
}

// ValidFenceName reports whether name is a usable fence name
// (election.ValidFenceName).
func ValidFenceName(name string, maxLen int) bool { return election.ValidFenceName(name, maxLen) }
