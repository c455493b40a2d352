package proxy_test

import (
	"math"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/proxy"
)

func TestValidFenceName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"jobs", true},
		{"billing-2026.q4_run", true},
		{"J", true},
		{"0jobs", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"-jobs", false},
		{".jobs", false},
		{"jobs/x", false},
		{"{jobs}", false},
		{"jo bs", false},
		{"jöbs", false},
		{"jobs\x00", false},
	}
	for _, tt := range tests {
		if got := proxy.ValidFenceName(tt.name, 128); got != tt.want {
			t.Errorf("ValidFenceName(%q): got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := proxy.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: got %v, want valid", err)
	}
	tests := []struct {
		name   string
		mutate func(*proxy.Config)
		want   string
	}{
		{"no statements", func(c *proxy.Config) { c.MaxStatements = 0 }, "max statements"},
		{"too many params", func(c *proxy.Config) { c.MaxParams = 70000 }, "max params"},
		{"no fence name", func(c *proxy.Config) { c.MaxFenceName = 0 }, "max fence name"},
		{"no verify timeout", func(c *proxy.Config) { c.VerifyTimeout = 0 }, "verify timeout"},
		{"no verify rate", func(c *proxy.Config) { c.VerifyRate = 0 }, "verify rate"},
		{"negative verify rate", func(c *proxy.Config) { c.VerifyRate = -1 }, "verify rate"},
		{"NaN verify rate", func(c *proxy.Config) { c.VerifyRate = math.NaN() }, "verify rate"},
		{"infinite verify rate", func(c *proxy.Config) { c.VerifyRate = math.Inf(1) }, "verify rate"},
		{"no verify burst", func(c *proxy.Config) { c.VerifyBurst = 0 }, "verify burst"},
		{"no verify fences", func(c *proxy.Config) { c.VerifyFences = 0 }, "verify fences"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := proxy.DefaultConfig()
			tt.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error about %s", err, tt.want)
			}
		})
	}
}
