package redis

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam21RepeatedKeyReadAmplifies: MaxReplyBytes is weighed by the
// script after each command ran, so a read's reply is built inside Redis
// first (the script's reply buffer, outside maxmemory, then again as a
// Lua table). The package doc accepts that cost as "reading a large key
// costs Redis that memory for the moment": at most the key's size. But
// MGET may name the same key, and HMGET the same field, as often as
// there are arguments (4095), and Redis copies the value into the reply
// each time. With the default limits (1 MiB values, 4096 arguments):
// one 1 MiB string, then MGET k k k ... (4095 times, a request of ~60 KB
// with a short key name) makes Redis build a 4 GiB reply before the
// script refuses it; a few such requests at once, or one against a
// smaller server, and the OOM killer takes Redis, with every high-water
// mark not yet on disk. The same guard exists for SRANDMEMBER and
// HRANDFIELD's repeated elements (checkArgs), not for these two default
// commands. Here, scaled down (16 KiB values and replies, a 16 KiB value
// read 1024 times), Redis's used_memory_peak rises by ~16 MiB, 1000 times
// MaxReplyBytes, for a write that is then refused.
//
// Expected: a write that names one key (MGET) or field (HMGET) many
// times cannot make Redis build more than a bounded multiple of
// MaxReplyBytes: refused before sending (INVALID_REQUEST, limit
// MaxReplyBytes), or weighed before it runs. Severity: high (memory
// exhaustion of the Redis holding the marks, by any token holder, with
// default commands and configuration).
func TestRedTeam21RepeatedKeyReadAmplifies(t *testing.T) {
	const times = 1024
	for _, name := range []string{"MGET", "HMGET"} {
		t.Run(name, func(t *testing.T) {
			// A server of its own, so that its memory peak is this write's.
			srv, err := throwaway.Start(t.Context(), throwaway.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			cfg := DefaultConfig()
			cfg.MaxValueBytes, cfg.MaxReplyBytes = 16<<10, 16<<10
			b, err := Open(t.Context(), srv.Addr(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			db := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
			t.Cleanup(func() { _ = db.Close() })

			f := unique("rt21rep")
			value := strings.Repeat("v", cfg.MaxValueBytes)
			execOKOn(t, b, f, 5, []string{"SET", key(f, "s"), value}, []string{"HSET", key(f, "h"), "f", value})
			cmd := []string{"MGET"}
			if name == "HMGET" {
				cmd = []string{"HMGET", key(f, "h")}
			}
			for range times {
				if name == "MGET" {
					cmd = append(cmd, key(f, "s"))
				} else {
					cmd = append(cmd, "f")
				}
			}
			peak0 := rt21Peak(t, db)
			_, err = b.Exec(t.Context(), f, 5, [][]string{cmd})
			rise := rt21Peak(t, db) - peak0
			r, _ := tokens.AsRefusal(err)
			// A bound with room to spare: four times the limit plus the value.
			if rise > int64(4*cfg.MaxReplyBytes+cfg.MaxValueBytes) {
				t.Errorf("%s naming one %d-byte value %d times: Redis's used_memory_peak rose by %d KiB (MaxReplyBytes %d KiB) building the reply; the write got %.160v",
					name, len(value), times, rise>>10, cfg.MaxReplyBytes>>10, r)
			}
		})
	}
}
