package redislease_test

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// leaseWorker is the seed's lease worker: SET key id NX PX ttl, then INCR
// the counter for its token; renew with compare-and-PEXPIRE, release with
// compare-and-DEL.
type leaseWorker struct {
	c            *goredis.Client
	key, counter string
	id           string
}

var (
	renewScript   = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	releaseScript = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// acquire takes the lease and returns the token, or 0 if someone holds it.
func (w *leaseWorker) acquire(t *testing.T, ttl time.Duration) int64 {
	t.Helper()
	ctx := t.Context()
	ok, err := w.c.SetNX(ctx, w.key, w.id, ttl).Result()
	if err != nil {
		t.Fatalf("%s: SET NX: %v", w.id, err)
	}
	if !ok {
		return 0
	}
	tok, err := w.c.Incr(ctx, w.counter).Result()
	if err != nil {
		t.Fatalf("%s: INCR: %v", w.id, err)
	}
	return tok
}

func (w *leaseWorker) renew(t *testing.T, ttl time.Duration) bool {
	t.Helper()
	n, err := renewScript.Run(t.Context(), w.c, []string{w.key}, w.id, ttl.Milliseconds()).Int()
	if err != nil {
		t.Fatalf("%s: renew: %v", w.id, err)
	}
	return n == 1
}

func (w *leaseWorker) release(t *testing.T) {
	t.Helper()
	if err := releaseScript.Run(t.Context(), w.c, []string{w.key}, w.id).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		t.Fatalf("%s: release: %v", w.id, err)
	}
}

func newClient(t *testing.T) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitGone waits until key no longer exists (its PX ran out).
func waitGone(t *testing.T, c *goredis.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.Exists(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists after 10s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
