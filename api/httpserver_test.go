package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api"
)

func TestHTTPServerConfigValidate(t *testing.T) {
	if err := api.DefaultHTTPServerConfig().Validate(); err != nil {
		t.Fatalf("DefaultHTTPServerConfig: got %v, want valid", err)
	}
	tests := []struct {
		name   string
		mutate func(*api.HTTPServerConfig)
		want   string
	}{
		{"no header timeout", func(c *api.HTTPServerConfig) { c.ReadHeaderTimeout = 0 }, "read header timeout"},
		{"no read timeout", func(c *api.HTTPServerConfig) { c.ReadTimeout = 0 }, "read timeout"},
		{"read shorter than header", func(c *api.HTTPServerConfig) { c.ReadTimeout = time.Second }, "read timeout"},
		{"no write timeout", func(c *api.HTTPServerConfig) { c.WriteTimeout = 0 }, "write timeout"},
		{"no idle timeout", func(c *api.HTTPServerConfig) { c.IdleTimeout = -time.Second }, "idle timeout"},
		{"tiny headers", func(c *api.HTTPServerConfig) { c.MaxHeaderBytes = 100 }, "max header bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := api.DefaultHTTPServerConfig()
			tt.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error about %s", err, tt.want)
			}
		})
	}
	c := api.DefaultHTTPServerConfig()
	s := api.NewHTTPServer(nil, c)
	if s.ReadHeaderTimeout != c.ReadHeaderTimeout || s.ReadTimeout != c.ReadTimeout || s.WriteTimeout != c.WriteTimeout ||
		s.IdleTimeout != c.IdleTimeout || s.MaxHeaderBytes != c.MaxHeaderBytes {
		t.Errorf("NewHTTPServer: got %+v, want the limits of %+v", s, c)
	}
}
