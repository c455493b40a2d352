package api

import (
	"fmt"
	"net/http"
	"time"
)

// HTTPServerConfig bounds what one client can hold of the HTTP server: a
// connection that sends its request slowly (slowloris), reads its answer
// slowly, or sits idle, and the size of its headers.
type HTTPServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its answer: reading the body, the write (statement timeout
	// plus the etcd verification) and writing the answer. A write cut off
	// by it may still have been applied; keep it well above the longest
	// write.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers, in bytes.
	MaxHeaderBytes int
}

// DefaultHTTPServerConfig returns the limits fencegate serves HTTP with
// unless told otherwise.
func DefaultHTTPServerConfig() HTTPServerConfig {
	return HTTPServerConfig{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// Validate reports the first field out of range.
func (c HTTPServerConfig) Validate() error {
	switch {
	case c.ReadHeaderTimeout <= 0:
		return fmt.Errorf("api: HTTP read header timeout must be positive, got %v", c.ReadHeaderTimeout)
	case c.ReadTimeout < c.ReadHeaderTimeout:
		return fmt.Errorf("api: HTTP read timeout must be at least the read header timeout %v, got %v", c.ReadHeaderTimeout, c.ReadTimeout)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("api: HTTP write timeout must be positive, got %v", c.WriteTimeout)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("api: HTTP idle timeout must be positive, got %v", c.IdleTimeout)
	case c.MaxHeaderBytes < 4096:
		return fmt.Errorf("api: HTTP max header bytes must be at least 4096, got %d", c.MaxHeaderBytes)
	}
	return nil
}

// NewHTTPServer returns an http.Server serving h within c's limits.
func NewHTTPServer(h http.Handler, c HTTPServerConfig) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
	}
}
