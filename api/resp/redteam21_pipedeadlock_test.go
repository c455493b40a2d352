package resp_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencegate/fencegate/api/resp"
)

// TestRedTeam21PipelineDeadlock: a client pipelines many commands (a bulk
// load that also reads, go-redis Pipelined: it writes every command, then
// reads every reply). Redis reads the whole query and queues the replies
// in its client output buffer, so the pipeline completes (~0.1 s here).
// fencegate's session stops reading while it writes replies: when the
// replies fill the socket towards the client, which is still writing its
// commands and not reading yet, the session blocks in its write, stops
// reading, the client blocks in its write, and the two wait on each other
// until WriteTimeout (30 s by default, 3 s here); then the session drops
// the connection. The client gets "connection reset" for the whole
// pipeline, while every command of the batches before the deadlock was
// applied in Redis: here the INCRs show how many writes were applied and
// reported failed, and a client that retries the pipeline applies them
// twice. The client's socket buffers are set to 64 KiB so that the test
// needs MBs, not tens of MB; with default buffers the same happened
// with 1200 rounds (~40 MB each way; 133 INCRs applied, all reported
// failed). Expected: as with Redis, the pipeline completes (keep
// reading while replies are pending, or buffer replies up to a bound and
// refuse beyond it without dropping acknowledged work). Severity: medium
// (hang for WriteTimeout, then applied writes reported as failed).
func TestRedTeam21PipelineDeadlock(t *testing.T) {
	e := newEnv(t, resp.Config{WriteTimeout: 3 * time.Second})
	f := unique("rt21dl")
	tok, _ := e.lead(t, f)
	val := strings.Repeat("v", 32<<10)
	const rounds = 400
	run := func(c *goredis.Client, k, n string) error {
		ctx := t.Context()
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for range rounds {
				p.Set(ctx, k, val, 0)
				p.Get(ctx, k)
				p.Incr(ctx, n)
			}
			return nil
		})
		return err
	}
	start := time.Now()
	plain := unique("rt21dlplain")
	if err := run(rt21Client(t, redisServer.Addr(), "", ""), plain, plain+"n"); err != nil {
		t.Fatalf("Redis itself: %v", err)
	}
	t.Logf("Redis itself: pipeline done in %v", time.Since(start))
	start = time.Now()
	n := "{" + f + "}:n"
	err := run(rt21Client(t, e.addr, f, strconv.FormatUint(tok, 10)), "{"+f+"}:k", n)
	if err != nil {
		t.Errorf("fencegate: pipeline of %d commands failed after %v: %v; Redis holds INCR count %q: writes applied and reported failed",
			3*rounds, time.Since(start).Round(time.Millisecond), err, e.stored(t, n))
	}
}

// rt21Client is a go-redis client as a user configures it, with 64 KiB
// socket buffers.
func rt21Client(t *testing.T, addr, user, pass string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{
		Addr: addr, Username: user, Password: pass, MaxRetries: -1,
		ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := c.(*net.TCPConn)
			_ = tc.SetReadBuffer(64 << 10)
			_ = tc.SetWriteBuffer(64 << 10)
			return c, nil
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
