package main

import (
	"testing"
	"time"
)

// TestUnknownCommand: a mistyped command is a usage error (status 2),
// like a bad flag, not a failed campaign.
func TestUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"rnu"}, {"frobnicate"}} {
		if got := run(t.Context(), args); got != 2 {
			t.Errorf("fencechaos %s: got status %d, want 2", args[0], got)
		}
	}
}

// TestCampaignFlagUsage: flags out of range are refused with status 2
// before any process of the cluster starts.
func TestCampaignFlagUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus"},
		{"--duration=5"},
		{"--duration=-1s"},
		{"--ttl=1500ms"},
		{"--reckless=2"},
		{"--concurrency=0"},
		{"--timeout=0s"},
		{"--interval=-1ms"},
		{"--gap-min=-1s"},
		{"--print-violations=-1"},
	} {
		if got := runCampaign(t.Context(), args); got != 2 {
			t.Errorf("fencechaos run %s: got status %d, want 2", args[0], got)
		}
	}
}

func TestCampaignCheckRanges(t *testing.T) {
	ok := campaignConfig{Duration: time.Minute, TTL: 2 * time.Second, GapMin: 2 * time.Second, GapMax: 4 * time.Second, Interval: 5 * time.Millisecond, Timeout: time.Second, Concurrency: 6, RecklessP: 0.6, PrintMax: 20}
	if got := ok.checkRanges(); got != "" {
		t.Fatalf("the defaults: got %q, want no complaint", got)
	}
	for _, tt := range []struct {
		change func(*campaignConfig)
		want   string
	}{
		{func(c *campaignConfig) { c.Duration = 0 }, "--duration=0s: want a positive duration"},
		{func(c *campaignConfig) { c.TTL = 1500 * time.Millisecond }, "--ttl=1.5s: want a whole number of seconds, at least 1s"},
		{func(c *campaignConfig) { c.RecklessP = -0.1 }, "--reckless=-0.1: want a probability from 0 to 1"},
		{func(c *campaignConfig) { c.Concurrency = 0 }, "--concurrency=0: want at least 1"},
		{func(c *campaignConfig) { c.PrintMax = -1 }, "--print-violations=-1: want a count from 0"},
	} {
		c := ok
		tt.change(&c)
		if got := c.checkRanges(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
