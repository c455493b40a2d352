package redislease_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestCounterLostRefusesTokensHandedOutAgain: once the source sees the
// counter gone (its Redis lost the keys), the tokens up to the highest
// handed out before are TERM_ENDED for whoever holds the lease; the
// first token past them leads again.
func TestCounterLostRefusesTokensHandedOutAgain(t *testing.T) {
	ctx := t.Context()
	srv, err := throwaway.Start(ctx, throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redislease.New(c, redislease.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fence := unique("floor")
	k := s.Keys(fence)
	decide := func(tok int64) tokens.Outcome {
		t.Helper()
		term, held, err := s.Verify(ctx, fence, tok)
		if err != nil {
			t.Fatalf("Verify %d: %v", tok, err)
		}
		return tokens.DecideVerified(tokens.Token(tok), 0, term, held)
	}
	w := &leaseWorker{c: c, key: k.Lease, counter: k.Counter, id: "a"}
	if tok := w.acquire(t, time.Minute); tok != 1 || decide(tok) != tokens.Accept {
		t.Fatalf("first leader: token %d", tok)
	}
	w.release(t)
	w.id = "b"
	if tok := w.acquire(t, time.Minute); tok != 2 || decide(tok) != tokens.Accept {
		t.Fatalf("second leader: token %d", tok)
	}
	// Its Redis loses the keys; the source reads them gone.
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	for i, want := range []tokens.Outcome{tokens.Ended, tokens.Ended, tokens.Accept} {
		w.id = string(rune('c' + i))
		tok := w.acquire(t, time.Minute)
		if got := decide(tok); got != want {
			t.Errorf("leader %s after the loss, token %d: %v, want %v", w.id, tok, got, want)
		}
		if got := tokens.Decide(tokens.Token(tok), 0, s.Term(fence)); got != want {
			t.Errorf("leader %s after the loss, token %d, from memory: %v, want %v", w.id, tok, got, want)
		}
		w.release(t)
	}
}
