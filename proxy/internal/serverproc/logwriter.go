package serverproc

import (
	"bytes"
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
	cut     bool // partial's line is longer than MaxLineBytes
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

// MaxLineBytes is the most of one line a LogWriter keeps and logs; the
// rest of a longer line (PostgreSQL quotes a client's input in its
// errors, so a client decides how long a line is) is dropped, and the
// line logged ends in " [cut]".
const MaxLineBytes = 16 << 10

// Write takes any part of the output; a line is handled once its newline
// has arrived. It never fails. Each byte is looked at once.
func (w *LogWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if room := MaxLineBytes - len(w.partial); len(part) > room {
			part, w.cut = part[:max(room, 0)], true
		}
		w.partial = append(w.partial, part...)
		if i < 0 {
			break
		}
		b = b[i+1:]
		line := string(w.partial)
		if w.cut {
			line += " [cut]"
		}
		w.partial, w.cut = w.partial[:0], false
		w.line(line)
	}
	return n, nil
}

// line handles one whole line. w.mu is held.
func (w *LogWriter) line(line string) {
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
