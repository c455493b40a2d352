package main

import (
	"context"
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

func TestSleepForHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if sleepFor(ctx, time.Hour) {
		t.Error("got true from a cancelled sleep, want false")
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
