package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rt2Tree is pid and every descendant of it.
func rt2Tree(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

func rt2Signal(t *testing.T, pids []int, sig syscall.Signal) {
	t.Helper()
	for _, p := range pids {
		_ = syscall.Kill(p, sig)
	}
}

// acksSince counts acknowledged writes per front/backend after at.
func acksSince(r *rt2Record, at time.Time, backend string) map[string]int {
	m := map[string]int{}
	for _, a := range r.all() {
		if a.out == rt2Acked && a.at.After(at) && a.backend == backend {
			m[a.front]++
		}
	}
	return m
}

// TestRedTeam2BackendPaused: Redis, then PostgreSQL, paused (SIGSTOP)
// mid-load on every way in, for longer than fencegate's timeouts, then
// resumed. /readyz must say which is down and come back; writes must come
// back on every way in; no acknowledged write may be missing and no
// refusal may name a write that was applied. Then both are paused again
// and fencegate gets SIGTERM: it must still exit in bounded time.
func TestRedTeam2BackendPaused(t *testing.T) {
	e := newRT2Env(t)
	p := e.startServe(t, "--shutdown-timeout=5s")
	tok, _ := e.lead(t, "rt", "w1")
	l := &rt2Load{fence: "rt", token: tok}
	l.start(t, p, 3)
	defer func() {
		// Never leave a backend stopped.
		rt2Signal(t, []int{e.rd.PID()}, syscall.SIGCONT)
		rt2Signal(t, rt2Tree(e.pg.PID()), syscall.SIGCONT)
	}()
	start := time.Now()
	waitFor(t, "writes on every way in", func() bool {
		return len(acksSince(l.rec, start, "postgres")) == 3 && len(acksSince(l.rec, start, "redis")) == 3
	})

	for _, b := range []struct {
		name string
		pids func() []int
	}{
		{"redis", func() []int { return []int{e.rd.PID()} }},
		{"postgres", func() []int { return rt2Tree(e.pg.PID()) }},
	} {
		pids := b.pids()
		rt2Signal(t, pids, syscall.SIGSTOP)
		stoppedAt := time.Now()
		var body string
		ok := false
		for time.Since(stoppedAt) < 20*time.Second {
			var code int
			code, body = rt2Get("http://" + p.metr + "/readyz")
			if code == 503 && strings.Contains(body, b.name) {
				ok = true
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !ok {
			t.Errorf("%s paused: /readyz on --metrics-addr never said 503 naming %s; last %q", b.name, b.name, body)
		}
		t.Logf("%s paused: /readyz after %v: %q", b.name, time.Since(stoppedAt).Round(time.Millisecond), strings.TrimSpace(body))
		// Past every write and statement timeout (5s) and Redis's read timeout (3s).
		time.Sleep(7 * time.Second)
		rt2Signal(t, pids, syscall.SIGCONT)
		resumed := time.Now()
		waitFor(t, b.name+" ready again", func() bool { code, _ := rt2Get("http://" + p.metr + "/readyz"); return code == 200 })
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := acksSince(l.rec, resumed, b.name)
			want := 3
			if b.name == "redis" {
				want = 3 // http, grpc, resp
			}
			if len(got) == want {
				t.Logf("%s resumed: writes back on %v within %v", b.name, got, time.Since(resumed).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s resumed 30s ago: acknowledged writes since only on %v", b.name, got)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Both paused, then SIGTERM.
	rt2Signal(t, []int{e.rd.PID()}, syscall.SIGSTOP)
	pgPids := rt2Tree(e.pg.PID())
	rt2Signal(t, pgPids, syscall.SIGSTOP)
	time.Sleep(500 * time.Millisecond)
	sigAt := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(40 * time.Second):
		t.Errorf("fencegate did not exit within 40s of SIGTERM with its backends paused (--shutdown-timeout=5s)\n%s", tail(p.log(), 20))
		rt2Signal(t, []int{e.rd.PID()}, syscall.SIGCONT)
		rt2Signal(t, pgPids, syscall.SIGCONT)
		<-p.exited
	}
	took := p.exitAt.Sub(sigAt)
	t.Logf("exit with backends paused: %v after %v", p.exitErr, took)
	if took > 12*time.Second {
		t.Errorf("took %v to exit on SIGTERM with the backends paused, want about --shutdown-timeout (5s)", took)
	}
	rt2Signal(t, []int{e.rd.PID()}, syscall.SIGCONT)
	rt2Signal(t, pgPids, syscall.SIGCONT)
	l.finish()
	if strings.Contains(p.log(), "WARNING: DATA RACE") || strings.Contains(p.log(), "panic:") {
		t.Errorf("race or panic in fencegate:\n%s", p.log())
	}
	// Let PostgreSQL finish whatever it was committing when paused.
	time.Sleep(time.Second)
	counts := l.rec.check(t, e, "rt")
	t.Logf("answers: %v", counts)
	reasons := map[string]int{}
	for _, a := range l.rec.all() {
		if a.out != rt2Acked {
			reasons[a.front+"/"+a.backend+"/"+a.out.String()+"/"+a.reason]++
		}
	}
	t.Logf("not acknowledged, by reason: %v", reasons)
	// The slowest answers of each kind while the process served.
	slow := map[string]rt2Attempt{}
	for _, a := range l.rec.all() {
		if a.at.After(sigAt) {
			continue
		}
		k := a.front + "/" + a.backend
		if a.took > slow[k].took {
			slow[k] = a
		}
	}
	for k, a := range slow {
		t.Logf("slowest answer before SIGTERM %s: %v, %s %s %.200s", k, a.took.Round(time.Millisecond), a.out, a.reason, a.detail)
	}
}

// TestRedTeam2WriteTimeoutPostgresPaused: --write-timeout (5s) "bounds a
// whole PostgreSQL write". With PostgreSQL paused (SIGSTOP: a host that
// stopped answering, a blackholed network) for 20s, an HTTP and a gRPC
// write whose callers wait 60s must be answered within the write timeout
// and a little (BACKEND_UNAVAILABLE), not held until PostgreSQL returns;
// and whatever they are answered must match the table afterwards.
func TestRedTeam2WriteTimeoutPostgresPaused(t *testing.T) {
	e := newRT2Env(t)
	p := e.startServe(t, "--write-timeout=5s", "--statement-timeout=5s")
	tok, _ := e.lead(t, "rt", "w1")
	T := strconv.FormatUint(tok, 10)
	// Warm the pool.
	if out, _, d := rt2HTTPPost(p.http, "/v1/fences/rt/sql", T, `{"statements":[{"sql":"INSERT INTO rt2(id) VALUES ($1)","params":["warm"]}]}`); out != rt2Acked {
		t.Fatalf("warm-up write: %s", d)
	}
	pids := rt2Tree(e.pg.PID())
	rt2Signal(t, pids, syscall.SIGSTOP)
	defer rt2Signal(t, pids, syscall.SIGCONT)
	stoppedAt := time.Now()
	type answer struct {
		out    rt2Outcome
		reason string
		detail string
		took   time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		t0 := time.Now()
		hc := &http.Client{Timeout: 60 * time.Second}
		req, _ := http.NewRequest("POST", "http://"+p.http+"/v1/fences/rt/sql",
			strings.NewReader(`{"statements":[{"sql":"INSERT INTO rt2(id) VALUES ($1)","params":["during-pause"]}]}`))
		req.Header.Set("Fencing-Token", T)
		resp, err := hc.Do(req)
		var a answer
		if err != nil {
			a.out, a.reason, a.detail = rt2HTTPAnswer(0, nil, err)
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			a.out, a.reason, a.detail = rt2HTTPAnswer(resp.StatusCode, b, nil)
		}
		a.took = time.Since(t0)
		done <- a
	}()
	var a answer
	select {
	case a = <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("PostgreSQL paused: an HTTP write with --write-timeout=5s has had no answer after %v", time.Since(stoppedAt).Round(time.Millisecond))
		rt2Signal(t, pids, syscall.SIGCONT)
		a = <-done
	}
	rt2Signal(t, pids, syscall.SIGCONT)
	t.Logf("answer: %s %s after %v: %.300s", a.out, a.reason, a.took.Round(time.Millisecond), a.detail)
	time.Sleep(time.Second)
	in := e.pgIDs(t)["during-pause"]
	switch {
	case a.out == rt2Acked && !in:
		t.Errorf("LOST: acknowledged and not in the table")
	case a.out == rt2Refused && in:
		t.Errorf("REFUSAL LIED: refused (%s) and in the table", a.reason)
	}
	t.Logf("row in the table afterwards: %v", in)
}
