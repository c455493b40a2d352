package resp_test

import (
	"bufio"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencegate/fencegate/api/resp"
)

// readReply6 reads one whole reply like raw.reply, but returns the read
// error instead of failing the test, so a test can say what the client saw.
func readReply6(br *bufio.Reader) (string, error) {
	l, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	l = strings.TrimRight(l, "\r\n")
	if l == "" {
		return "", nil
	}
	switch l[0] {
	case '$':
		n, err := strconv.Atoi(l[1:])
		if err != nil || n < 0 {
			return "$nil", nil
		}
		buf := make([]byte, n+2)
		for got := 0; got < len(buf); {
			m, err := br.Read(buf[got:])
			got += m
			if err != nil {
				return "", err
			}
		}
		return "$" + string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(l[1:])
		parts := make([]string, 0, n)
		for range n {
			p, err := readReply6(br)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return "*[" + strings.Join(parts, " ") + "]", nil
	}
	return l, nil
}

// TestRedTeam6StaleWriteDeadline: the session moves its write deadline
// only in flush, after a batch's replies are all buffered. A reply larger
// than the 16 KiB write buffer makes bufio write to the connection in the
// middle of runBatch, under the deadline the previous flush set; on a
// connection that was idle longer than WriteTimeout that deadline is in
// the past. The write fails at once, the session drops the connection, and
// the client, which reads diligently, never gets the replies of writes
// that were applied (here an INCR): told nothing, with Redis changed.
func TestRedTeam6StaleWriteDeadline(t *testing.T) {
	const wt = 300 * time.Millisecond
	e := newEnv(t, resp.Config{WriteTimeout: wt})
	f := unique("rt6dl")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	big := strings.Repeat("b", 20<<10) // over the writer's 16 KiB buffer
	r := authRaw(t, e, f, tok)         // AUTH's flush sets the deadline to now+wt
	r.send(cmd("SET", F("big"), big))
	r.want("+OK")

	time.Sleep(3 * wt) // an idle client: the deadline set above has passed

	r.send(cmd("INCR", F("n")) + cmd("GET", F("big")))
	got1, err1 := readReply6(r.br)
	got2, err2 := readReply6(r.br)
	stored := e.stored(t, F("n"))
	if err1 != nil || got1 != ":1" || err2 != nil || got2 != "$"+big {
		t.Errorf("after %v idle, pipeline INCR + GET of a %d-byte value: got (%q, %v), (%.20q, %v); want :1 and the value. Redis holds n=%q: the INCR was applied and its reply lost",
			3*wt, len(big), got1, err1, got2, err2, stored)
	}
}

// TestRedTeam6StaleWriteDeadlineGoRedis: the same with go-redis as users
// configure it (default retries). An LPOP of a large element on a
// connection idle longer than WriteTimeout: the session pops the element,
// cannot write the reply under the stale deadline and drops the
// connection; go-redis reads io.EOF, which it retries, and the retry pops
// the next element. The application gets the second element as if it were
// the first, and the first is gone from Redis without anyone having
// received it.
func TestRedTeam6StaleWriteDeadlineGoRedis(t *testing.T) {
	const wt = 300 * time.Millisecond
	e := newEnv(t, resp.Config{WriteTimeout: wt})
	ctx := t.Context()
	f := unique("rt6dg")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	first, second := strings.Repeat("A", 20<<10), strings.Repeat("B", 20<<10)
	c := goredis.NewClient(&goredis.Options{
		Addr: e.addr, Username: f, Password: strconv.FormatUint(tok, 10),
		PoolSize:                 1, // one connection, reused after the idle time
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.RPush(ctx, F("q"), first, second).Err(); err != nil {
		t.Fatal(err)
	}

	time.Sleep(3 * wt) // the worker waits for its next job

	got, err := c.LPop(ctx, F("q")).Result()
	left, _ := e.admin.LLen(ctx, F("q")).Result()
	if err != nil || got != first || left != 1 {
		t.Errorf("LPOP after %v idle: got %.3q... (%d bytes), err %v, %d elements left in Redis; want the first element (AAA...) and 1 left",
			3*wt, got, len(got), err, left)
	}
}
