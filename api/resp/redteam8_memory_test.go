package resp_test

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api/resp"
)

// Red team, round 8: memory bounds of the RESP listener. AUTH checks only
// the form of a fence and a token, so any client that can connect is
// "logged in" after AUTH x 1 and gets the full per-command limits.

// rt8Heap is the live heap after two collections.
func rt8Heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// rt8SendBig writes a command whose arguments after the leading ones are
// n copies of value, without building the whole command in memory.
func rt8SendBig(t *testing.T, r *raw, lead []string, value string, n int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(lead)+n)
	for _, a := range lead {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	r.send(b.String())
	hdr := "$" + strconv.Itoa(len(value)) + "\r\n"
	for range n {
		if _, err := io.WriteString(r.c, hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(r.c, value); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(r.c, "\r\n"); err != nil {
			t.Fatal(err)
		}
	}
}

const rt8MiB = 1 << 20

// TestRedTeam8MultiQueueBytesUnbounded: MaxCommandBytes bounds one command
// and one pipelined batch (Config), but the MULTI queue is bounded only in
// commands (MaxQueued, 64 by default): one connection can make the listener
// hold MaxQueued × MaxCommandBytes (64 × 8 MiB = 512 MiB with serve's
// settings) before EXEC, and then send it to Redis as one script. Here,
// with MaxCommandBytes 1 MiB, 64 queued commands of 1 MiB each must not
// leave 64 MiB held by the session.
func TestRedTeam8MultiQueueBytesUnbounded(t *testing.T) {
	const perCmd = rt8MiB - 4096
	e := newEnv(t, resp.Config{MaxBulkBytes: rt8MiB, MaxCommandBytes: rt8MiB, MaxQueued: 64})
	f := unique("rt8mq")
	r := e.raw(t)
	// Any token of the right form: AUTH checks nothing else.
	r.send(cmd("AUTH", f, "1") + cmd("MULTI"))
	r.want("+OK")
	r.want("+OK")
	before := rt8Heap()
	value := strings.Repeat("v", perCmd)
	queued := 0
	for i := range 64 {
		rt8SendBig(t, r, []string{"SET", "{" + f + "}:k" + strconv.Itoa(i)}, value, 1)
		if got := r.reply(); got == "+QUEUED" {
			queued++
		} else {
			t.Logf("command %d: %.120q", i, got)
		}
	}
	value = ""
	held := rt8Heap() - before
	t.Logf("queued %d commands of %d KiB; live heap grew by %d MiB", queued, perCmd>>10, held/rt8MiB)
	// A transaction is one write, like a pipelined batch: the session
	// should hold about MaxCommandBytes of it, not MaxQueued times that.
	if limit := int64(16 * rt8MiB); held > limit {
		t.Errorf("MULTI queue of %d commands × %d KiB: the listener holds %d MiB for one connection (MaxCommandBytes is 1 MiB); want at most %d MiB",
			queued, perCmd>>10, held/rt8MiB, limit/rt8MiB)
	}
	r.send(cmd("DISCARD"))
	r.reply()
}

// TestRedTeam8IdleConnectionKeepsCommandBuffer: the reader keeps the
// scratch buffer of the largest command a connection ever sent
// (reader.scratch is reused, never shrunk), so a connection that sent
// one big command and then idles holds MaxCommandBytes (8 MiB by
// default, twice that after slices.Grow) for the rest of its life:
// MaxConnections (10000) of them hold tens of GiB. Redis shrinks an
// idle client's query buffer. The command here is refused (the token
// is no leader's) and needs no valid token.
func TestRedTeam8IdleConnectionKeepsCommandBuffer(t *testing.T) {
	const conns, args = 8, 6
	e := newEnv(t, resp.Config{})
	f := unique("rt8idle")
	rs := make([]*raw, conns)
	for i := range rs {
		rs[i] = e.raw(t)
		rs[i].send(cmd("AUTH", f, "1"))
		rs[i].want("+OK")
	}
	before := rt8Heap()
	value := strings.Repeat("x", rt8MiB-64)
	for _, r := range rs {
		rt8SendBig(t, r, []string{"NOSUCHCOMMAND"}, value, args)
		r.wantReply("big command", "-") // refused: UNKNOWN_TERM, whatever the command
		r.send(cmd("PING"))
		r.want("+PONG")
	}
	value = ""
	held := rt8Heap() - before
	t.Logf("%d idle connections after one %d MiB command each: live heap grew by %d MiB", conns, args, held/rt8MiB)
	if limit := int64(conns * rt8MiB); held > limit {
		t.Errorf("%d idle connections hold %d MiB after one refused %d MiB command each; want at most %d MiB (an idle connection should not keep its largest command's buffer)",
			conns, held/rt8MiB, args, limit/rt8MiB)
	}
}
