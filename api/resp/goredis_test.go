package resp_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api/resp"
)

// TestGoRedis drives go-redis v9 (HELLO 3 AUTH at connect) through the
// listener: plain commands, a pipeline and a TxPipeline, with the
// leader's token, the zombie's (refused, nothing stored) and a token
// changed with AUTH on the same connection.
func TestGoRedis(t *testing.T) {
	e := newEnv(t, resp.Config{})
	ctx := t.Context()
	fence := unique("gor")
	old, cur := e.succession(t, fence)
	k := func(name string) string { return "{" + fence + "}:" + name }

	type write func(c *goredis.Client, name string) error
	plain := func(c *goredis.Client, name string) error {
		if err := c.Set(ctx, k(name), "v", 0).Err(); err != nil {
			return err
		}
		n, err := c.Incr(ctx, k(name+"-n")).Result()
		if err == nil && n != 1 {
			return fmt.Errorf("INCR: got %d, want 1", n)
		}
		return err
	}
	pipeline := func(c *goredis.Client, name string) error {
		cmds, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, k(name), "v", 0)
			p.HSet(ctx, k(name+"-h"), "f", "1")
			p.Get(ctx, k(name))
			return nil
		})
		if err != nil {
			return err
		}
		if got := cmds[2].(*goredis.StringCmd).Val(); got != "v" {
			return fmt.Errorf("GET in pipeline: got %q, want v", got)
		}
		return nil
	}
	tx := func(c *goredis.Client, name string) error {
		var get *goredis.StringCmd
		_, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, k(name), "v", 0)
			p.LPush(ctx, k(name+"-l"), "a", "b")
			get = p.Get(ctx, k(name))
			return nil
		})
		if err != nil {
			return err
		}
		if get.Val() != "v" {
			return fmt.Errorf("GET in MULTI: got %q, want v", get.Val())
		}
		return nil
	}
	for _, tt := range []struct {
		name string
		do   write
	}{{"plain", plain}, {"pipeline", pipeline}, {"tx", tx}} {
		t.Run(tt.name, func(t *testing.T) {
			leader := plainClient(t, e.addr, fence, fmt.Sprint(cur))
			if err := tt.do(leader, tt.name+"-leader"); err != nil {
				t.Fatalf("leader: %v", err)
			}
			if got := e.stored(t, k(tt.name+"-leader")); got != "v" {
				t.Fatalf("leader's key: got %q, want v", got)
			}
			zombie := plainClient(t, e.addr, fence, fmt.Sprint(old))
			err := tt.do(zombie, tt.name+"-zombie")
			if err == nil || !strings.HasPrefix(err.Error(), "STALE_TOKEN fencegate: ") {
				t.Fatalf("zombie: got %v, want STALE_TOKEN fencegate: ...", err)
			}
			if got := e.stored(t, k(tt.name+"-zombie")); got != "" {
				t.Fatalf("zombie's key: got %q stored, want nothing", got)
			}
			// A connection that changes its token with AUTH: stale first,
			// then current on the same connection.
			one := plainClient(t, e.addr, fence, fmt.Sprint(old))
			conn := one.Conn()
			defer conn.Close()
			if err := conn.Set(ctx, k(tt.name+"-auth"), "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "STALE_TOKEN") {
				t.Fatalf("before AUTH: got %v, want STALE_TOKEN", err)
			}
			if err := conn.AuthACL(ctx, fence, fmt.Sprint(cur)).Err(); err != nil {
				t.Fatalf("AUTH: %v", err)
			}
			if err := conn.Set(ctx, k(tt.name+"-auth"), "v", 0).Err(); err != nil {
				t.Fatalf("after AUTH: %v", err)
			}
			if got := e.stored(t, k(tt.name+"-auth")); got != "v" {
				t.Fatalf("key written after AUTH: got %q, want v", got)
			}
		})
	}
}

// TestGoRedisReplies checks replies of several shapes and Redis's own
// errors come through as Redis sends them, in RESP2 and RESP3.
func TestGoRedisReplies(t *testing.T) {
	e := newEnv(t, resp.Config{})
	ctx := t.Context()
	fence := unique("rep")
	tok, _ := e.lead(t, fence)
	k := func(name string) string { return "{" + fence + "}:" + name }
	for _, proto := range []int{2, 3} {
		c := goredis.NewClient(&goredis.Options{Addr: e.addr, Username: fence, Password: fmt.Sprint(tok), Protocol: proto, MaxRetries: -1})
		defer c.Close()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("RESP%d PING: %v", proto, err)
		}
		if err := c.HSet(ctx, k("h"), "a", "1", "b", "2").Err(); err != nil {
			t.Fatal(err)
		}
		m, err := c.HGetAll(ctx, k("h")).Result()
		if err != nil || m["a"] != "1" || m["b"] != "2" {
			t.Fatalf("RESP%d HGETALL: got %v, %v; want a=1 b=2", proto, m, err)
		}
		if _, err := c.Get(ctx, k("missing")).Result(); !errors.Is(err, goredis.Nil) {
			t.Fatalf("RESP%d GET of a missing key: got %v, want redis.Nil", proto, err)
		}
		err = c.LPush(ctx, k("h"), "x").Err()
		if err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE ") {
			t.Fatalf("RESP%d LPUSH to a hash: got %v, want WRONGTYPE as Redis sends it", proto, err)
		}
		if s, err := c.Set(ctx, k("s"), "v", 0).Result(); err != nil || s != "OK" {
			t.Fatalf("RESP%d SET: got %q, %v; want OK", proto, s, err)
		}
		if err := c.Set(ctx, "nofence", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "INVALID_REQUEST fencegate: ") {
			t.Fatalf("RESP%d SET of an untagged key: got %v, want INVALID_REQUEST", proto, err)
		}
	}
}
