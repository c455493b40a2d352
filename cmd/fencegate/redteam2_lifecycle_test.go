package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestRedTeam2SigtermUnderLoad: writers on HTTP, gRPC, the PostgreSQL
// listener and the RESP listener, against both backends; SIGTERM (and, in
// a second run, SIGINT) mid-load. Every acknowledged write must be in its
// backend, no refusal may name a write that was applied, the process must
// exit 0 within --shutdown-timeout and a little, and say what it did.
func TestRedTeam2SigtermUnderLoad(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newRT2Env(t)
			p := e.startServe(t, "--shutdown-timeout=5s")
			tok, _ := e.lead(t, "rt", "w1")
			l := &rt2Load{fence: "rt", token: tok}
			l.start(t, p, 4)
			// Let every writer get going.
			deadline := time.Now().Add(20 * time.Second)
			for {
				c := map[string]int{}
				for _, a := range l.rec.all() {
					if a.out == rt2Acked {
						c[a.front+a.backend]++
					}
				}
				if len(c) == 6 && minOf(c) >= 20 {
					break
				}
				if time.Now().After(deadline) {
					l.finish()
					t.Fatalf("writers did not get going: %v\n%s", c, p.log())
				}
				time.Sleep(20 * time.Millisecond)
			}
			sigAt := time.Now()
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				t.Errorf("fencegate did not exit within 30s of %v (shutdown-timeout 5s)", sig)
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
			took := p.exitAt.Sub(sigAt)
			time.Sleep(200 * time.Millisecond)
			l.finish()
			t.Logf("exited %v after %v", p.exitErr, took)
			if p.exitErr != nil {
				t.Errorf("exit: got %v, want status 0 after %v", p.exitErr, sig)
			}
			if took > 8*time.Second {
				t.Errorf("took %v to exit, want within --shutdown-timeout (5s) and a little", took)
			}
			log := p.log()
			if !strings.Contains(log, "shutting down") {
				t.Errorf("the log does not say it is shutting down:\n%s", tail(log, 30))
			}
			if strings.Contains(log, "WARNING: DATA RACE") || strings.Contains(log, "panic:") {
				t.Errorf("race or panic in fencegate:\n%s", log)
			}
			counts := l.rec.check(t, e, "rt")
			after := map[string]int{}
			for _, a := range l.rec.all() {
				if a.at.After(sigAt) {
					after[a.front+"/"+a.backend+"/"+a.out.String()]++
				}
				if a.front == "pgwire" && a.out != rt2Acked && a.at.After(sigAt) {
					t.Logf("pgwire answer after signal: %s %s: %s", a.out, a.reason, a.detail)
				}
				if a.out == rt2Refused && a.at.After(sigAt) {
					t.Logf("refused after signal: %s %s %s: %s", a.front, a.backend, a.reason, a.detail)
				}
			}
			t.Logf("answers: %v", counts)
			t.Logf("answers after the signal: %v", after)
			t.Logf("log tail:\n%s", tail(log, 12))
		})
	}
}

func minOf(m map[string]int) int {
	first := true
	var n int
	for _, v := range m {
		if first || v < n {
			n, first = v, false
		}
	}
	return n
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestRedTeam2DrainObservable: a PostgreSQL-listener session holds a
// transaction open, so the replica drains for a while after SIGTERM.
// During the drain: every listener refuses new connections, /readyz on
// both ports is not 200 (OPERATIONS.md: "answers NOT_SERVING and /readyz
// 503 at once"), the gRPC health service says NOT_SERVING.
func TestRedTeam2DrainObservable(t *testing.T) {
	e := newRT2Env(t)
	p := e.startServe(t, "--shutdown-timeout=20s")
	tok, _ := e.lead(t, "rt", "w1")
	ctx := t.Context()
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&fencegate.fence=rt&fencegate.token=%d", p.pg, tok))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO rt2 VALUES ('held-1')"); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shutting down line", func() bool { return strings.Contains(p.log(), "shutting down") })
	time.Sleep(300 * time.Millisecond)
	if !p.running() {
		t.Fatalf("exited at once (%v), the open transaction should hold the drain\n%s", p.exitErr, p.log())
	}
	for name, addr := range map[string]string{"grpc": p.grpc, "http": p.http, "pg": p.pg, "resp": p.resp} {
		if rt2Dials(addr) {
			t.Errorf("draining: the %s listener %s still accepts connections", name, addr)
		}
	}
	for name, url := range map[string]string{"http": "http://" + p.http + "/readyz", "metrics": "http://" + p.metr + "/readyz"} {
		code, body := rt2Get(url)
		if code == 200 {
			t.Errorf("draining: /readyz on the %s port answers 200 %q", name, body)
		}
		t.Logf("draining: /readyz on the %s port: %d %s", name, code, strings.TrimSpace(body))
	}
	// grpc-health-probe style check, if grpcurl is present: skip otherwise.
	if _, err := exec.LookPath("grpcurl"); err == nil {
		out, _ := exec.Command("grpcurl", "-plaintext", p.grpc, "grpc.health.v1.Health/Check").CombinedOutput()
		if strings.Contains(string(out), `"SERVING"`) {
			t.Errorf("draining: gRPC health says SERVING: %s", out)
		}
	}
	// The held transaction still commits (drain lets it finish).
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		t.Errorf("COMMIT of the held transaction during the drain: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("fencegate did not exit within 10s of the last transaction ending\n%s", tail(p.log(), 20))
	}
	if !e.pgIDs(t)["held-1"] {
		t.Errorf("the held transaction's COMMIT was answered and held-1 is not in the table")
	}
}

// TestRedTeam2DrainTermEnds: the term of a transaction held open on the
// PostgreSQL listener ends (its leader resigns) while the replica drains.
// Serving, fencegate ends such a transaction within EndedCheckInterval
// (TERM_ENDED, "transaction ended with its term"); the control subtest
// shows it. Draining, it must do the same: its election watch must not
// stop while writes are still being served.
func TestRedTeam2DrainTermEnds(t *testing.T) {
	for _, drain := range []bool{false, true} {
		name := "serving (control)"
		if drain {
			name = "draining"
		}
		t.Run(name, func(t *testing.T) {
			e := newRT2Env(t)
			p := e.startServe(t, "--shutdown-timeout=20s")
			tok, resign := e.lead(t, "rt", "w1")
			ctx := t.Context()
			c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&fencegate.fence=rt&fencegate.token=%d", p.pg, tok))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.WithoutCancel(ctx))
			if _, err := c.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, "INSERT INTO rt2 VALUES ('zombie-1')"); err != nil {
				t.Fatal(err)
			}
			if drain {
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the shutting down line", func() bool { return strings.Contains(p.log(), "shutting down") })
			}
			resign()
			// The replica's watch would see the resignation within
			// milliseconds; the sweep runs every 100ms.
			time.Sleep(2 * time.Second)
			_, err1 := c.Exec(ctx, "INSERT INTO rt2 VALUES ('zombie-2')")
			_, err2 := c.Exec(ctx, "COMMIT")
			t.Logf("after the term ended: INSERT: %v; COMMIT: %v", err1, err2)
			ids := e.pgIDs(t)
			if ids["zombie-1"] || ids["zombie-2"] {
				t.Errorf("a transaction whose term ended (leader resigned) was committed through the %s replica: rows %v", name, ids)
				var pe *pgconn.PgError
				if err2 == nil || !errors.As(err2, &pe) {
					t.Logf("COMMIT answered %v", err2)
				}
			}
			if drain {
				t.Logf("log:\n%s", tail(p.log(), 10))
			}
		})
	}
}
