package redis

import (
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam21RandCountIgnoresElementSize: the package doc promises that
// SRANDMEMBER or HRANDFIELD "with a negative count whose repeated
// elements would weigh over Config.MaxReplyBytes" is refused before
// sending, because Redis builds that reply (repeating elements, however
// small the key) before the script can weigh it. checkArgs bounds the
// count by MaxReplyBytes / 16 as if every element weighed its 16 bytes
// of overhead only, and forgets the element's own bytes, which are what
// MaxReplyBytes counts and can be up to MaxValueBytes each. A set of ONE
// member of MaxValueBytes, then SRANDMEMBER key -(MaxReplyBytes/16):
// accepted by the check and sent; Redis builds a reply of count ×
// MaxValueBytes inside the script (and again as a Lua table) before the
// script refuses it for MaxReplyBytes. With the defaults (1 MiB values,
// 4 MiB replies) that is SRANDMEMBER k -262144 of a 1 MiB member: 256 GiB
// that Redis tries to allocate for a request of a few bytes, outside
// maxmemory (a script's reply buffer) — the OOM killer takes Redis and
// every high-water mark not yet on disk with it. Here, scaled down
// (16 KiB values and replies, one member of 16 KiB, count -1024), Redis
// builds a 16 MiB reply, 1000 times MaxReplyBytes, from a write the
// check let through. Needs --redis-allow SRANDMEMBER or HRANDFIELD.
//
// Expected: refused before sending, INVALID_REQUEST with metadata limit
// MaxReplyBytes, counting each repeated element at up to MaxValueBytes
// (or otherwise bounding what Redis builds). Severity: high where the
// command is allowed (a Redis crash, taking unpersisted marks with it);
// the documented guarantee does not hold.
func TestRedTeam21RandCountIgnoresElementSize(t *testing.T) {
	for _, name := range []string{"SRANDMEMBER", "HRANDFIELD"} {
		t.Run(name, func(t *testing.T) {
			// A server of its own, so that its memory peak is this write's.
			srv, err := throwaway.Start(t.Context(), throwaway.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			cfg := DefaultConfig()
			cfg.MaxValueBytes, cfg.MaxReplyBytes = 16<<10, 16<<10
			cfg.Allow = []string{"SRANDMEMBER", "HRANDFIELD"}
			b, err := Open(t.Context(), srv.Addr(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			db := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
			t.Cleanup(func() { _ = db.Close() })

			f := unique("rt21rand")
			member := strings.Repeat("m", cfg.MaxValueBytes)
			execOKOn(t, b, f, 5, []string{"SADD", key(f, "s"), member}, []string{"HSET", key(f, "h"), "f", member})
			// The most the check lets through: MaxReplyBytes / 16 per
			// element, / 32 per field and value.
			n := int64(cfg.MaxReplyBytes) / elementCost
			cmd := []string{"SRANDMEMBER", key(f, "s"), strconv.FormatInt(-n, 10)}
			if name == "HRANDFIELD" {
				n /= 2
				cmd = []string{"HRANDFIELD", key(f, "h"), strconv.FormatInt(-n, 10), "WITHVALUES"}
			}
			peak0 := rt21Peak(t, db)
			_, err = b.Exec(t.Context(), f, 5, [][]string{cmd})
			peak := rt21Peak(t, db) - peak0
			r, _ := tokens.AsRefusal(err)
			if r == nil || r.Reason != tokens.ReasonInvalidRequest || r.Metadata["limit"] != "MaxReplyBytes" {
				t.Errorf("%s: got %.200v; want INVALID_REQUEST (limit MaxReplyBytes) before sending: its reply holds %d values of %d bytes, %d times MaxReplyBytes (Redis's used_memory_peak rose by %d MiB)",
					strings.Join(cmd[:1], " ")+" "+strings.Join(cmd[2:], " "), err, n, len(member), n*int64(len(member))/int64(cfg.MaxReplyBytes), peak>>20)
			}
		})
	}
}

// rt21Peak is the server's used_memory_peak.
func rt21Peak(t *testing.T, db *goredis.Client) int64 {
	t.Helper()
	info, err := db.Info(t.Context(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory_peak:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory_peak")
	return 0
}
