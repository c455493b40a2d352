package redislease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/tokens"
)

func TestValidatePattern(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		bad     string // part of the error; "" for valid
	}{
		{"lease:%s", ""},
		{"lease:%s:token", ""},
		{"lease:{%s}", ""},
		{"{%s}:lease", ""},
		{"lease:{}:%s", ""},
		{"lease", "exactly one %s"},
		{"lease:%s:%s", "exactly one %s"},
		{"lease:%d", "exactly one %s"},
		{"lease:%s:100%", "exactly one %s"},
		{"{other}:%s", "hash tag"},
		{"x{y}%s", "hash tag"},
	} {
		err := redislease.ValidatePattern("key pattern", tc.pattern)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%q: got %v, want valid", tc.pattern, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%q: got %v, want an error about %q", tc.pattern, err, tc.bad)
		}
	}
}

func newSource(t *testing.T) *redislease.Source {
	t.Helper()
	s, err := redislease.New(newClient(t), redislease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestVerify follows a fence through the seed worker's life cycle and
// checks the term Verify reads, and what tokens.DecideVerified makes of
// it, at each step.
func TestVerify(t *testing.T) {
	ctx := t.Context()
	s := newSource(t)
	fence := unique("verify")
	k := s.Keys(fence)
	if k.Lease != "lease:"+fence || k.Counter != "lease:"+fence+":token" {
		t.Fatalf("got keys %+v, want the seed's layout", k)
	}
	c := newClient(t)
	a := &leaseWorker{c: c, key: k.Lease, counter: k.Counter, id: "a"}
	b := &leaseWorker{c: c, key: k.Lease, counter: k.Counter, id: "b"}

	check := func(step string, token int64, wantRev, wantLast int64, wantHeld bool, want tokens.Outcome) {
		t.Helper()
		term, held, err := s.Verify(ctx, fence, token)
		if err != nil {
			t.Fatalf("%s: Verify: %v", step, err)
		}
		if term.Rev != wantRev || term.Last != wantLast || held != wantHeld {
			t.Fatalf("%s: got rev %d last %d held %v, want rev %d last %d held %v", step, term.Rev, term.Last, held, wantRev, wantLast, wantHeld)
		}
		if got := tokens.DecideVerified(tokens.Token(token), 0, term, held); got != want {
			t.Fatalf("%s: got %v, want %v", step, got, want)
		}
	}
	check("nothing yet: a forged token", 1, 0, 0, false, tokens.Unknown)

	ta := a.acquire(t, time.Minute)
	if got := b.acquire(t, time.Minute); got != 0 {
		t.Fatalf("b took a held lease: token %d", got)
	}
	check("a leads", ta, ta, ta, true, tokens.Accept)
	check("a token above the counter", ta+1, ta, ta, false, tokens.Unknown)
	if got := s.Term(fence); got.Rev != ta || got.Leader != "a" {
		t.Fatalf("memory after Verify: got %+v, want term %d led by a", got, ta)
	}

	a.release(t)
	check("a released: its term is over", ta, 0, ta, true, tokens.Ended)

	tb := b.acquire(t, 200*time.Millisecond)
	if tb != ta+1 {
		t.Fatalf("b's token: got %d, want %d", tb, ta+1)
	}
	check("b leads: a is a zombie", ta, tb, tb, true, tokens.Stale)
	check("b leads", tb, tb, tb, true, tokens.Accept)
	if b.renew(t, 200*time.Millisecond) != true {
		t.Fatal("b could not renew its own lease")
	}
	if a.renew(t, time.Minute) {
		t.Fatal("a renewed b's lease")
	}
	waitGone(t, c, k.Lease)
	check("b's lease expired", tb, 0, tb, true, tokens.Ended)
	check("still no forgery", tb+5, 0, tb, false, tokens.Unknown)
}

// TestPoll: a fence Verify found is refreshed by Poll, so memory follows
// the lease changing hands and expiring; Term does not allocate.
func TestPoll(t *testing.T) {
	ctx := t.Context()
	s := newSource(t)
	fence := unique("poll")
	k := s.Keys(fence)
	c := newClient(t)
	a := &leaseWorker{c: c, key: k.Lease, counter: k.Counter, id: "a"}
	b := &leaseWorker{c: c, key: k.Lease, counter: k.Counter, id: "b"}
	if _, _, err := s.Verify(ctx, fence, 1); err != nil {
		t.Fatal(err)
	}
	if len(s.Terms()) != 0 {
		t.Fatalf("got %v, want no fence polled before any counter", s.Terms())
	}
	ta := a.acquire(t, time.Minute)
	if _, _, err := s.Verify(ctx, fence, ta); err != nil {
		t.Fatal(err)
	}
	a.release(t)
	tb := b.acquire(t, time.Minute)
	if got := s.Term(fence); got.Rev != ta {
		t.Fatalf("before Poll: got term %d, want %d", got.Rev, ta)
	}
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	got := s.Term(fence)
	if got.Rev != tb || got.Leader != "b" || got.Changes != 2 {
		t.Fatalf("after Poll: got %+v, want term %d led by b, 2 changes", got, tb)
	}
	if o := tokens.Decide(tokens.Token(ta), 0, got); o != tokens.Stale {
		t.Fatalf("a's token from memory: got %v, want stale", o)
	}
	b.release(t)
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if o := tokens.Decide(tokens.Token(tb), 0, s.Term(fence)); o != tokens.Ended {
		t.Fatalf("b's token after release, from memory: got %v, want ended", o)
	}
	terms := s.Terms()
	if len(terms) != 1 || terms[0].Election != fence {
		t.Fatalf("Terms: got %v, want %s only", terms, fence)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.Term(fence) }); n != 0 {
		t.Fatalf("Term: got %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.Keys(fence) }); n != 0 {
		t.Fatalf("Keys of a polled fence: got %v allocations, want 0", n)
	}
}

// TestRun: the poll loop refreshes memory on its own and stops with ctx.
func TestRun(t *testing.T) {
	c := newClient(t)
	s, err := redislease.New(c, redislease.Config{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fence := unique("run")
	k := s.Keys(fence)
	a := &leaseWorker{c: c, key: k.Lease, counter: k.Counter, id: "a"}
	ta := a.acquire(t, time.Minute)
	if _, _, err := s.Verify(t.Context(), fence, ta); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	a.release(t)
	deadline := time.Now().Add(10 * time.Second)
	for s.Term(fence).HasLeader() {
		if time.Now().After(deadline) {
			t.Fatal("Run never saw the lease released")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: got %v, want context.Canceled", err)
	}
}

// TestCorruptCounter: a counter that holds no token is an error, not a
// term.
func TestCorruptCounter(t *testing.T) {
	s := newSource(t)
	fence := unique("corrupt")
	if err := newClient(t).Set(t.Context(), s.Keys(fence).Counter, "banana", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, held, err := s.Verify(t.Context(), fence, 1); err == nil || held {
		t.Fatalf("got held %v, err %v, want an error", held, err)
	}
}

func TestNewConfig(t *testing.T) {
	c := newClient(t)
	for _, tc := range []struct {
		name string
		cfg  redislease.Config
	}{
		{"bad key", redislease.Config{KeyPattern: "lease"}},
		{"bad counter", redislease.Config{CounterPattern: "{x}%s"}},
		{"same", redislease.Config{KeyPattern: "l:%s", CounterPattern: "l:%s"}},
		{"negative interval", redislease.Config{PollInterval: -1}},
	} {
		if _, err := redislease.New(c, tc.cfg); err == nil {
			t.Errorf("%s: got no error, want one", tc.name)
		}
	}
	if _, err := redislease.New(nil, redislease.Config{}); err == nil {
		t.Error("nil client: got no error")
	}
	var _ election.Source = (*redislease.Source)(nil)
}
