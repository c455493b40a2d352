package main

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGRPCOutcome(t *testing.T) {
	refusal := func(code codes.Code, reason string, md map[string]string) error {
		st, err := status.New(code, "refused").WithDetails(&errdetails.ErrorInfo{Domain: "fencegate", Reason: reason, Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	tests := []struct {
		name       string
		err        error
		want       Outcome
		wantReason string
	}{
		{"ok", nil, Acked, ""},
		{"stale", refusal(codes.Aborted, "STALE_TOKEN", nil), Refused, "STALE_TOKEN"},
		{"backend down, nothing sent", refusal(codes.Unavailable, "BACKEND_UNAVAILABLE", nil), Refused, "BACKEND_UNAVAILABLE"},
		{"backend lost mid-write", refusal(codes.Unavailable, "BACKEND_UNAVAILABLE", map[string]string{"outcome": "unknown"}), Unknown, "BACKEND_UNAVAILABLE (outcome unknown)"},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), Unknown, "DeadlineExceeded: context deadline exceeded"},
		{"transport", status.Error(codes.Unavailable, "connection reset"), Unknown, "Unavailable: connection reset"},
		{"TLS handshake refused", status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: certificate required"`), Refused, reasonTLSRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := grpcOutcome(tt.err)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("got %v %q, want %v %q", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

func TestHTTPOutcome(t *testing.T) {
	tests := []struct {
		name       string
		code       int
		body       string
		want       Outcome
		wantReason string
	}{
		{"ok", 200, `{"fence":"chaos","token":"3","results":[{"rowsAffected":"1"}]}`, Acked, ""},
		{"stale", 409, `{"code":10,"message":"stale","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"STALE_TOKEN","domain":"fencegate","metadata":{"fence":"chaos"}}]}`, Refused, "STALE_TOKEN"},
		{"backend lost mid-write", 503, `{"code":14,"details":[{"reason":"BACKEND_UNAVAILABLE","domain":"fencegate","metadata":{"outcome":"unknown"}}]}`, Unknown, "BACKEND_UNAVAILABLE (outcome unknown)"},
		{"not fencegate's", 502, `bad gateway`, Unknown, "HTTP 502: bad gateway"},
		{"other domain", 500, `{"details":[{"reason":"X","domain":"elsewhere"}]}`, Unknown, `HTTP 500: {"details":[{"reason":"X","domain":"elsewhere"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := httpOutcome(tt.code, []byte(tt.body))
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("got %v %q, want %v %q", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

// echoServer answers every connection by echoing what it reads. When got
// is not nil, each chunk read is sent there first, so a test can see what
// reached the server even when the answer is held on the way back.
func echoServer(t *testing.T, got chan<- string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if got != nil {
							got <- string(buf[:n])
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

func TestCutProxy(t *testing.T) {
	p, err := newCutProxy(echoServer(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	old, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if got, err := roundTrip(old, "hello", 2*time.Second); err != nil || got != "hello" {
		t.Fatalf("before the cut: got %q, %v; want hello", got, err)
	}

	p.Cut()
	// Silence, not an error: the bytes go nowhere.
	_, err = roundTrip(old, "lost", 200*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("during the cut, old connection: got %v, want a timeout", err)
	}
	during, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("during the cut, dial: %v (want accepted, then silence)", err)
	}
	defer during.Close()
	if _, err := roundTrip(during, "lost", 200*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("during the cut, new connection: got %v, want a timeout", err)
	}

	p.Restore()
	// Connections that lived through the cut are closed.
	_ = old.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := old.Read(make([]byte, 8)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("after restore, old connection: got %v, want it closed", err)
	}
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, err := roundTrip(fresh, "again", 2*time.Second); err != nil || got != "again" {
		t.Errorf("after restore: got %q, %v; want again", got, err)
	}
}

func TestSleepForHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if sleepFor(ctx, time.Hour) {
		t.Error("got true from a cancelled sleep, want false")
	}
}

func TestCutProxyStall(t *testing.T) {
	// The target reports what it received, so the test can see that
	// requests get through a stall while the answers are held.
	got := make(chan string, 8)
	p, err := newCutProxy(echoServer(t, got))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s, err := roundTrip(c, "one", 2*time.Second); err != nil || s != "one" {
		t.Fatalf("before the stall: got %q, %v; want one", s, err)
	}
	<-got

	p.Stall()
	_, err = roundTrip(c, "two", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("during the stall: got %v, want a timeout (the answer held)", err)
	}
	select {
	case s := <-got:
		if s != "two" {
			t.Errorf("target received %q during the stall, want two", s)
		}
	case <-time.After(2 * time.Second):
		t.Error("the request did not reach the target during the stall")
	}

	p.Release()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "two" {
		t.Errorf("after release: got %q, %v; want the held answer two", buf, err)
	}
}

// TestSourceFaults: a source's own faults are injected only in its
// campaigns, and --faults knows them.
func TestSourceFaults(t *testing.T) {
	has := func(fs []fault, name string) bool {
		return slices.ContainsFunc(fs, func(f fault) bool { return f.name == name })
	}
	for _, tc := range []struct {
		source string
		want   bool
	}{{"etcd", false}, {"zookeeper", true}, {"redis-lease", false}, {"postgres-term", false}} {
		src, err := lookupSource(tc.source)
		if err != nil {
			t.Fatal(err)
		}
		c := &campaign{source: src}
		if got := has(c.faults(), "kill-zookeeper"); got != tc.want {
			t.Errorf("--source=%s: kill-zookeeper among its faults: got %v, want %v", tc.source, got, tc.want)
		}
		if !has(c.faults(), "pause-leader") {
			t.Errorf("--source=%s: pause-leader missing from its faults", tc.source)
		}
	}
	if !slices.Contains(faultNames(), "kill-zookeeper") {
		t.Errorf("faultNames: got %v, want kill-zookeeper among them", faultNames())
	}
}
