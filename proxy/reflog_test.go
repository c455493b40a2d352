package proxy

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

func TestRefusalLog(t *testing.T) {
	var l refusalLog
	t0 := time.Unix(1000, 0)
	stale := refusalKey{fence: "jobs", reason: tokens.ReasonStaleToken, token: 7}
	type step struct {
		key            refusalKey
		at             time.Duration
		wantLog        bool
		wantSuppressed uint64
	}
	steps := []step{
		{stale, 0, true, 0},
		{stale, 10 * time.Millisecond, false, 0},
		{stale, 20 * time.Millisecond, false, 0},
		// Another token, reason or fence is news: logged at once.
		{refusalKey{fence: "jobs", reason: tokens.ReasonStaleToken, token: 8}, 30 * time.Millisecond, true, 0},
		{refusalKey{fence: "jobs", reason: tokens.ReasonTermEnded, token: 7}, 30 * time.Millisecond, true, 0},
		{refusalKey{fence: "other", reason: tokens.ReasonStaleToken, token: 7}, 30 * time.Millisecond, true, 0},
		{refusalKey{backend: 1, fence: "jobs", reason: tokens.ReasonStaleToken, token: 7}, 30 * time.Millisecond, true, 0},
		{stale, 999 * time.Millisecond, false, 0},
		// A second later: logged, with the three left out.
		{stale, time.Second, true, 3},
		{stale, time.Second + time.Millisecond, false, 0},
		{stale, 3 * time.Second, true, 1},
	}
	for i, s := range steps {
		log, suppressed := l.admit(s.key, t0.Add(s.at))
		if log != s.wantLog || suppressed != s.wantSuppressed {
			t.Errorf("step %d (%+v at %v): got log=%v suppressed=%d, want %v %d", i, s.key, s.at, log, suppressed, s.wantLog, s.wantSuppressed)
		}
	}
}

func TestRefusalLogBounded(t *testing.T) {
	var l refusalLog
	t0 := time.Unix(1000, 0)
	for i := range 3 * refusalLogKeys {
		k := refusalKey{fence: "f", reason: tokens.ReasonStaleToken, token: tokens.Token(i + 1)}
		if log, _ := l.admit(k, t0); !log {
			t.Fatalf("refusal %d: a new token not logged", i)
		}
		if len(l.seen) > refusalLogKeys {
			t.Fatalf("remembered refusals: got %d, want at most %d", len(l.seen), refusalLogKeys)
		}
	}
}
