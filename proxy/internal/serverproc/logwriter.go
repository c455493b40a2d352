package serverproc

import (
	"strings"
	"sync"
)

// KeepLines is how many of the last log lines a LogWriter keeps.
const KeepLines = 20

// LogWriter is the io.Writer a child's stdout and stderr go to. It splits the
// output into lines, passes each to logf with a prefix, keeps the last
// KeepLines and closes Ready when a line contains the ready text. Its methods
// are safe for concurrent use.
type LogWriter struct {
	format    string
	logf      func(string, ...any)
	readyText string
	ready     chan struct{}

	mu      sync.Mutex
	partial []byte
	last    []string
	isReady bool
}

// NewLogWriter returns a LogWriter that logs each line as "<prefix>: <line>"
// through logf (nil discards them) and watches for readyText.
func NewLogWriter(prefix, readyText string, logf func(format string, args ...any)) *LogWriter {
	return &LogWriter{
		format:    prefix + ": %s",
		logf:      logf,
		readyText: readyText,
		ready:     make(chan struct{}),
	}
}

// Write takes any part of the output; a line is handled once its newline
// has arrived. It never fails.
func (w *LogWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		i := strings.IndexByte(string(w.partial), '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if w.logf != nil {
			w.logf(w.format, line)
		}
		if len(w.last) == KeepLines {
			w.last = w.last[1:]
		}
		w.last = append(w.last, line)
		if !w.isReady && strings.Contains(line, w.readyText) {
			w.isReady = true
			close(w.ready)
		}
	}
	return len(b), nil
}

// Ready is closed when the first line containing the ready text is written.
func (w *LogWriter) Ready() <-chan struct{} { return w.ready }

// Tail returns a copy of the last n complete lines kept (at most KeepLines),
// oldest first.
func (w *LogWriter) Tail(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.last
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return append([]string(nil), lines...)
}
