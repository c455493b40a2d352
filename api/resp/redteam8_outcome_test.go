package resp_test

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// Red team, round 8: outcome honesty on backend trouble, through the RESP
// listener. A client must get the true result, a refusal with nothing
// applied, or an error saying the outcome is unknown: never OK for what
// was not applied, never a plain refusal for what was.

// rt8Cut says what the proxy does with the next chunk fencegate sends
// that carries a script (EVALSHA or EVAL).
const (
	rt8Relay       int32 = iota
	rt8CutAfterRun       // forward it, wait for Redis's reply (it ran), drop the reply, cut
	rt8CutBefore         // drop it and cut: Redis never sees it
)

// rt8Proxy is a TCP proxy between fencegate and Redis that cuts a
// connection at a chosen point of a write.
type rt8Proxy struct {
	t      *testing.T
	lis    net.Listener
	target string
	mode   atomic.Int32
	skip   atomic.Int32 // script writes to let through before the armed cut
	cuts   chan int32
	wg     sync.WaitGroup
}

func newRT8Proxy(t *testing.T, target string) *rt8Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rt8Proxy{t: t, lis: lis, target: target, cuts: make(chan int32, 16)}
	var mu sync.Mutex
	var open []net.Conn
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			mu.Unlock()
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.pipe(c, s) }()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *rt8Proxy) addr() string { return p.lis.Addr().String() }

// pipe relays one connection both ways, cutting it as mode says.
func (p *rt8Proxy) pipe(c, s net.Conn) {
	var dropping atomic.Bool
	cut := func(m int32) {
		c.Close()
		s.Close()
		select {
		case p.cuts <- m:
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // Redis to fencegate
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && dropping.Load() {
				// The reply to the script: it ran. fencegate never sees it.
				cut(rt8CutAfterRun)
				return
			}
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					s.Close()
					return
				}
			}
			if err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := bytes.ToLower(buf[:n])
			if (bytes.Contains(chunk, []byte("evalsha")) || bytes.Contains(chunk, []byte("\r\neval\r\n"))) &&
				p.mode.Load() != rt8Relay && p.skip.Add(-1) < 0 {
				switch m := p.mode.Load(); m {
				case rt8CutBefore:
					if p.mode.CompareAndSwap(m, rt8Relay) {
						cut(m)
						wg.Wait()
						return
					}
				case rt8CutAfterRun:
					if p.mode.CompareAndSwap(m, rt8Relay) {
						dropping.Store(true)
					}
				}
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				c.Close()
				break
			}
		}
		if err != nil {
			s.Close()
			break
		}
	}
	wg.Wait()
}

// arm makes the proxy cut the next script write as m says.
func (p *rt8Proxy) arm(m int32) { p.armAfter(m, 0) }

// armAfter makes the proxy cut the script write after the next skip ones.
func (p *rt8Proxy) armAfter(m int32, skip int32) {
	p.skip.Store(skip)
	p.mode.Store(m)
}

// waitCut waits for the armed cut to have happened.
func (p *rt8Proxy) waitCut(want int32) {
	p.t.Helper()
	select {
	case m := <-p.cuts:
		if m != want {
			p.t.Fatalf("cut %d, want %d", m, want)
		}
	case <-time.After(10 * time.Second):
		p.t.Fatal("the proxy never cut")
	}
}

// rt8Honest checks one reply against whether its write was applied.
func rt8Honest(t *testing.T, what, reply string, applied bool, okPrefix string) {
	t.Helper()
	unknown := strings.Contains(reply, "outcome unknown")
	switch {
	case strings.HasPrefix(reply, okPrefix) && !applied:
		t.Errorf("%s: answered %.200q, but nothing was applied", what, reply)
	case strings.HasPrefix(reply, "-") && applied && !unknown:
		t.Errorf("%s: answered %.200q (a refusal, outcome not said unknown), but the write WAS applied", what, reply)
	case !strings.HasPrefix(reply, "-") && !strings.HasPrefix(reply, okPrefix):
		t.Errorf("%s: unexpected reply %.200q", what, reply)
	default:
		t.Logf("%s: %.160q (applied: %v)", what, reply, applied)
	}
}

// TestRedTeam8ConnectionCutAfterScriptSent: a TCP proxy between
// fencegate and Redis cuts the connection after Redis ran a write's
// script and before fencegate reads the reply, or before Redis sees the
// script at all, for a single command, a pipelined batch and MULTI/EXEC.
// The replies must be honest: applied writes said "outcome unknown",
// nothing said OK unless applied.
func TestRedTeam8ConnectionCutAfterScriptSent(t *testing.T) {
	p := newRT8Proxy(t, redisServer.Addr())
	rcfg := redis.DefaultConfig()
	rcfg.PoolSize = 1
	e := newEnvAt(t, resp.Config{}, proxy.Options{}, rcfg, p.addr())
	f := unique("rt8cut")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	r := authRaw(t, e, f, tok)
	// Loads the script in Redis, so the cut write is an EVALSHA that runs.
	r.send(cmd("SET", F("warm"), "1"))
	r.want("+OK")

	// until the pool has a connection again after a cut.
	settle := func(tag string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r.send(cmd("SET", F("settle"), tag))
			if got := r.reply(); got == "+OK" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("fencegate does not write again after the cut")
			}
		}
	}

	for _, m := range []int32{rt8CutAfterRun, rt8CutBefore} {
		name := map[int32]string{rt8CutAfterRun: "after-run", rt8CutBefore: "before-send"}[m]
		applied := func(k string) bool { return e.stored(t, k) != "" }

		// One command.
		k := F("one-" + name)
		p.arm(m)
		r.send(cmd("SET", k, "v"))
		got := r.reply()
		p.waitCut(m)
		rt8Honest(t, name+": SET", got, applied(k), "+OK")
		settle(name + "1")

		// A pipelined batch: one script for the three.
		ks := []string{F("p1-" + name), F("p2-" + name), F("p3-" + name)}
		p.arm(m)
		r.send(cmd("SET", ks[0], "v") + cmd("INCR", ks[1]) + cmd("SET", ks[2], "v"))
		replies := []string{r.reply(), r.reply(), r.reply()}
		p.waitCut(m)
		for i, k := range ks {
			ok := "+OK"
			if i == 1 {
				ok = ":1"
			}
			rt8Honest(t, name+": pipelined "+k, replies[i], applied(k), ok)
		}
		settle(name + "2")

		// MULTI/EXEC.
		mk := []string{F("m1-" + name), F("m2-" + name)}
		r.send(cmd("MULTI") + cmd("SET", mk[0], "v") + cmd("SET", mk[1], "v"))
		r.want("+OK")
		r.want("+QUEUED")
		r.want("+QUEUED")
		p.arm(m)
		r.send(cmd("EXEC"))
		got = r.reply()
		p.waitCut(m)
		a0, a1 := applied(mk[0]), applied(mk[1])
		if a0 != a1 {
			t.Errorf("%s: MULTI half applied: %v %v", name, a0, a1)
		}
		rt8Honest(t, name+": EXEC", got, a0, "*[+OK +OK]")
		settle(name + "3")

		// A pipelined batch in which one command fails: the session runs
		// the others again around it (session.exec), and the first of
		// those runs is cut.
		sk := []string{F("s1-" + name), F("s2-" + name), F("s3-" + name)}
		if err := e.admin.Set(t.Context(), sk[1], "not a number", 0).Err(); err != nil {
			t.Fatal(err)
		}
		p.armAfter(m, 1)
		r.send(cmd("SET", sk[0], "v") + cmd("INCR", sk[1]) + cmd("SET", sk[2], "v"))
		replies = []string{r.reply(), r.reply(), r.reply()}
		p.waitCut(m)
		rt8Honest(t, name+": split, cut re-run", replies[0], applied(sk[0]), "+OK")
		if !strings.HasPrefix(replies[1], "-ERR value is not an integer") {
			t.Errorf("%s: split: INCR of a string: got %.200q, want Redis's error", name, replies[1])
		}
		rt8Honest(t, name+": split, after", replies[2], applied(sk[2]), "+OK")
		if e.stored(t, sk[1]) != "not a number" {
			t.Errorf("%s: split: the failed INCR changed its key", name)
		}
		settle(name + "4")
	}
}

// rt8Own starts a Redis of the test's own, for configuring it.
func rt8Own(t *testing.T) *throwaway.Server {
	t.Helper()
	own, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Close() })
	return own
}

// rt8Refused sends a single write, a pipelined batch and a MULTI through
// r while Redis refuses scripts, and returns a check of each answer
// against what Redis holds, to run once Redis answers reads again.
func rt8Refused(t *testing.T, e *env, r *raw, f, what string) (check func()) {
	t.Helper()
	F := func(s string) string { return "{" + f + "}:" + what + ":" + s }
	type sent struct {
		what, reply, ok string
		keys            []string
	}
	var all []sent
	r.send(cmd("SET", F("one"), "v"))
	all = append(all, sent{"SET", r.reply(), "+OK", []string{F("one")}})
	r.send(cmd("SET", F("p1"), "v") + cmd("SET", F("p2"), "v"))
	all = append(all, sent{"pipelined 1", r.reply(), "+OK", []string{F("p1")}})
	all = append(all, sent{"pipelined 2", r.reply(), "+OK", []string{F("p2")}})
	r.send(cmd("MULTI") + cmd("SET", F("m1"), "v") + cmd("SET", F("m2"), "v") + cmd("EXEC"))
	r.want("+OK")
	r.want("+QUEUED")
	r.want("+QUEUED")
	all = append(all, sent{"EXEC", r.reply(), "*[+OK +OK]", []string{F("m1"), F("m2")}})
	return func() {
		t.Helper()
		for _, s := range all {
			applied := false
			for _, k := range s.keys {
				applied = applied || e.stored(t, k) != ""
			}
			rt8Honest(t, what+": "+s.what, s.reply, applied, s.ok)
			if !strings.HasPrefix(s.reply, "-BACKEND_UNAVAILABLE") {
				t.Errorf("%s: %s: got %.200q, want BACKEND_UNAVAILABLE", what, s.what, s.reply)
			}
		}
	}
}

// TestRedTeam8RedisRefusesScripts: Redis out of memory (maxmemory,
// noeviction), a read-only replica, and Redis busy running another
// client's script past busy-reply-threshold: fencegate's writes are
// refused by Redis before the script runs, so the answer must be a
// refusal and nothing may be applied; once Redis is back to normal the
// same connection writes again.
func TestRedTeam8RedisRefusesScripts(t *testing.T) {
	own := rt8Own(t)
	e := newEnvAt(t, resp.Config{}, proxy.Options{}, redis.DefaultConfig(), own.Addr())
	ctx := t.Context()
	f := unique("rt8ref")
	tok, _ := e.lead(t, f)
	r := authRaw(t, e, f, tok)
	r.send(cmd("SET", "{"+f+"}:warm", "1"))
	r.want("+OK")
	back := func(what string) {
		t.Helper()
		r.send(cmd("SET", "{"+f+"}:back", what))
		r.wantReply(what+": once Redis is back", "+OK")
	}

	t.Run("OOM", func(t *testing.T) {
		if err := e.admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		check := rt8Refused(t, e, r, f, "oom")
		check()
		if err := e.admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		back("oom")
	})

	t.Run("READONLY", func(t *testing.T) {
		// A replica of a master that does not exist: it stays read-only
		// with its data.
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(dead.Addr().String())
		dead.Close()
		if err := e.admin.Do(ctx, "REPLICAOF", "127.0.0.1", port).Err(); err != nil {
			t.Fatal(err)
		}
		check := rt8Refused(t, e, r, f, "readonly")
		check()
		if err := e.admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		back("readonly")
	})

	t.Run("BUSY", func(t *testing.T) {
		if err := e.admin.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
			t.Fatal(err)
		}
		busy, err := net.Dial("tcp", own.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		if _, err := busy.Write([]byte(cmd("EVAL", "while true do end", "0"))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		check := rt8Refused(t, e, r, f, "busy")
		killer, err := net.Dial("tcp", own.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer killer.Close()
		_ = killer.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := killer.Write([]byte(cmd("SCRIPT", "KILL"))); err != nil {
			t.Fatal(err)
		}
		kr := &raw{t: t, c: killer, br: newBufReader(killer)}
		kr.want("+OK")
		// SCRIPT KILL answers before the script has stopped.
		for deadline := time.Now().Add(5 * time.Second); e.admin.Ping(ctx).Err() != nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("Redis still busy after SCRIPT KILL")
			}
		}
		check()
		back("busy")
	})
}
