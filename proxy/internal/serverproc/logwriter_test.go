package serverproc

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLogWriter(t *testing.T) {
	many := make([]string, KeepLines+3)
	for i := range many {
		many[i] = fmt.Sprintf("line %d\n", i)
	}
	tests := []struct {
		name      string
		writes    []string
		tailN     int
		wantLog   []string
		wantReady bool
		wantTail  []string
	}{
		{
			name:     "partial lines across writes",
			writes:   []string{"fir", "st\nsec", "ond\n", "third, no newline"},
			tailN:    5,
			wantLog:  []string{"srv: first", "srv: second"},
			wantTail: []string{"first", "second"},
		},
		{
			name:      "ready once, even when repeated",
			writes:    []string{"starting\nnow READY to go\n", "READY again\n"},
			tailN:     5,
			wantLog:   []string{"srv: starting", "srv: now READY to go", "srv: READY again"},
			wantReady: true,
			wantTail:  []string{"starting", "now READY to go", "READY again"},
		},
		{
			name:      "ready text split across writes",
			writes:    []string{"RE", "ADY\n"},
			tailN:     1,
			wantLog:   []string{"srv: READY"},
			wantReady: true,
			wantTail:  []string{"READY"},
		},
		{
			name:     "tail of the last N lines",
			writes:   many,
			tailN:    3,
			wantTail: []string{fmt.Sprintf("line %d", KeepLines), fmt.Sprintf("line %d", KeepLines+1), fmt.Sprintf("line %d", KeepLines+2)},
		},
		{
			name:     "tail keeps at most KeepLines",
			writes:   many,
			tailN:    100,
			wantTail: tailOf(many, KeepLines),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logged []string
			w := NewLogWriter("srv", "READY", func(format string, args ...any) {
				logged = append(logged, fmt.Sprintf(format, args...))
			})
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q): got %d, %v; want %d, nil", s, n, err, len(s))
				}
			}
			if tt.wantLog != nil && !slices.Equal(logged, tt.wantLog) {
				t.Errorf("logged: got %q, want %q", logged, tt.wantLog)
			}
			ready := false
			select {
			case <-w.Ready():
				ready = true
			default:
			}
			if ready != tt.wantReady {
				t.Errorf("ready: got %v, want %v", ready, tt.wantReady)
			}
			if got := w.Tail(tt.tailN); !slices.Equal(got, tt.wantTail) {
				t.Errorf("Tail(%d): got %q, want %q", tt.tailN, got, tt.wantTail)
			}
		})
	}
}

func TestLogWriterNilLogf(t *testing.T) {
	w := NewLogWriter("srv", "READY", nil)
	if _, err := w.Write([]byte("READY\n")); err != nil {
		t.Fatalf("Write: got %v, want nil", err)
	}
	select {
	case <-w.Ready():
	default:
		t.Error("ready: got false, want true")
	}
}

// tailOf returns the last n of writes, each without its newline.
func tailOf(writes []string, n int) []string {
	var lines []string
	for _, s := range writes[len(writes)-n:] {
		lines = append(lines, s[:len(s)-1])
	}
	return lines
}

// TestLogWriterLongLine: a line of 16 MiB, arriving as a pipe delivers
// it, costs about its length to read once, not its square, and is logged
// and kept cut to MaxLineBytes; the next line is whole.
func TestLogWriterLongLine(t *testing.T) {
	var logged []string
	w := NewLogWriter("srv", "READY", func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) })
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	const chunks = 256 // 16 MiB
	allocs := testing.AllocsPerRun(1, func() {
		for range chunks {
			_, _ = w.Write(chunk)
		}
		_, _ = w.Write([]byte("\nnext READY\n"))
	})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if len(logged) != 4 || logged[0] != "srv: "+strings.Repeat("x", MaxLineBytes)+" [cut]" || logged[1] != "srv: next READY" {
		t.Fatalf("logged %d lines, first %.40q… (%d bytes), want the long line cut to %d bytes and then %q", len(logged), logged[0], len(logged[0]), MaxLineBytes, "srv: next READY")
	}
	if allocs > 20 {
		t.Errorf("reading a 16 MiB line took %v allocations, want a few", allocs)
	}
	select {
	case <-w.Ready():
	default:
		t.Error("the line after the long one was not read whole")
	}
}
