package audit

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrClosed is returned by Reopen and Close after Close.
var ErrClosed = errors.New("audit: log closed")

// DefaultBuffer is how many records may wait for the writer when
// Options.Buffer is zero.
const DefaultBuffer = 4096

// flushSize is how much encoded output the writer gathers before it writes
// even though more records are queued.
const flushSize = 64 << 10

// Record is one decision on a write.
type Record struct {
	Time            time.Time `json:"time"`
	RequestID       string    `json:"request_id"`
	Principal       string    `json:"principal"`
	Peer            string    `json:"peer,omitempty"`
	Action          string    `json:"action"`
	Fence           string    `json:"fence"`
	Token           uint64    `json:"token"`
	Term            uint64    `json:"term"`
	HighWaterBefore uint64    `json:"high_water_before"`
	HighWaterAfter  uint64    `json:"high_water_after"`
	Backend         string    `json:"backend"`
	// Protocol is the way the request came in: grpc, http, pgwire or resp.
	Protocol string `json:"protocol,omitempty"`
	Role     string `json:"role,omitempty"`
	// Outcome is "accepted" or the refusal reason, e.g. "STALE_TOKEN".
	Outcome string `json:"outcome"`
	Rows    int64  `json:"rows_affected"`
	// Statements is Fingerprint of the statements, never their parameters.
	Statements string `json:"statements_sha256"`
	// Shadow marks a write the policy would have refused in shadow mode.
	Shadow bool `json:"shadow_denied,omitempty"`
	// RolledBack marks an accepted PostgreSQL-listener transaction its
	// client rolled back (or left): nothing of it was applied.
	RolledBack bool `json:"rolled_back,omitempty"`
}

// Options configure a Log.
type Options struct {
	// Logger receives write errors. Nil discards.
	Logger *slog.Logger
	// Registerer receives the audit metrics. Nil registers nothing.
	Registerer prometheus.Registerer
	// Buffer is how many records may be queued for the writer; zero means
	// DefaultBuffer.
	Buffer int
	// StuckAfter is how long one write to the file may take before Ready
	// reports the log stuck; zero means DefaultStuckAfter.
	StuckAfter time.Duration
}

// DefaultStuckAfter is Options.StuckAfter when zero.
const DefaultStuckAfter = 5 * time.Second

// Log is an open audit log. Its methods may be called from any goroutine.
type Log struct {
	path string
	log  *slog.Logger
	m    metrics

	// mu is held for reading while a record is queued and for writing by
	// Close, so that no Write sends on the closed queue.
	mu     sync.RWMutex
	closed bool

	queue  chan Record
	reopen chan chan error
	done   chan struct{}
	err    error // Close's result, set before done is closed

	// writing is when the write to the file in progress began (Unix
	// nanoseconds), 0 when none is.
	writing    atomic.Int64
	stuckAfter time.Duration

	// Owned by the writer goroutine.
	f       *os.File
	out     []byte // encoded records not yet written
	pending int    // records in out
	failing bool   // the last write failed; log again only once it works
	torn    bool   // the file ends in part of a record
}

type metrics struct {
	records, errors, blocked prometheus.Counter
	blockedSeconds           prometheus.Counter
}

// Open opens the audit log at path for appending, creating it with mode
// 0600, and starts its writer.
func Open(path string, opts Options) (*Log, error) {
	if opts.Buffer < 0 {
		return nil, fmt.Errorf("audit: buffer %d: must not be negative", opts.Buffer)
	}
	if opts.Buffer == 0 {
		opts.Buffer = DefaultBuffer
	}
	l := &Log{
		path:       path,
		log:        opts.Logger,
		queue:      make(chan Record, opts.Buffer),
		reopen:     make(chan chan error),
		done:       make(chan struct{}),
		out:        make([]byte, 0, flushSize+4096),
		stuckAfter: opts.StuckAfter,
		m: metrics{
			records: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "fencegate_audit_records_total",
				Help: "Audit records written to the audit log.",
			}),
			errors: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "fencegate_audit_write_errors_total",
				Help: "Audit records that could not be written (each is logged).",
			}),
			blocked: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "fencegate_audit_blocked_total",
				Help: "Audit writes that waited because the queue was full.",
			}),
			blockedSeconds: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "fencegate_audit_blocked_seconds_total",
				Help: "Time audit writes spent waiting for room in the queue.",
			}),
		},
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.stuckAfter <= 0 {
		l.stuckAfter = DefaultStuckAfter
	}
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	if r := opts.Registerer; r != nil {
		for _, c := range []prometheus.Collector{l.m.records, l.m.errors, l.m.blocked, l.m.blockedSeconds} {
			if err := r.Register(c); err != nil {
				f.Close()
				return nil, fmt.Errorf("audit: metrics: %w", err)
			}
		}
	}
	l.f = f
	go l.run()
	return l, nil
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return f, nil
}

// Write queues a copy of r for the log; a zero Time becomes now. It does no
// disk I/O. When the queue is full it waits for room: an audit record is
// never dropped to keep up. After Close the record is counted as a write
// error and logged.
func (l *Log) Write(r *Record) {
	rec := *r
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.m.errors.Inc()
		l.log.Error("audit: record written after Close", "path", l.path,
			"request_id", rec.RequestID, "fence", rec.Fence, "outcome", rec.Outcome)
		return
	}
	select {
	case l.queue <- rec:
	default:
		l.m.blocked.Inc()
		start := time.Now()
		l.queue <- rec
		l.m.blockedSeconds.Add(time.Since(start).Seconds())
	}
}

// Ready reports an error while one write to the file has taken longer
// than Options.StuckAfter (a hung disk or network file system): requests
// then wait for the audit queue, so the replica should not be sent more.
func (l *Log) Ready() error {
	if s := l.writing.Load(); s != 0 {
		if d := time.Since(time.Unix(0, s)); d > l.stuckAfter {
			return fmt.Errorf("audit log %s: one write has taken %s; %d records wait for it", l.path, d.Round(time.Second), len(l.queue))
		}
	}
	return nil
}

// Reopen closes the file and opens path again, for logrotate: records
// queued before the call go to the old file, later ones to the new. If the
// path cannot be opened, the old file stays in use and the error is
// returned.
func (l *Log) Reopen() error {
	req := make(chan error, 1)
	select {
	case l.reopen <- req:
		return <-req
	case <-l.done:
		return ErrClosed
	}
}

// Close writes every queued record, closes the file and stops the writer.
// Records written after Close are not written.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	return l.err
}

// run is the writer: it encodes records as they come and writes whenever
// the queue is empty or enough has gathered.
func (l *Log) run() {
	defer close(l.done)
	for {
		select {
		case rec, ok := <-l.queue:
			if !ok {
				l.flush()
				l.err = l.f.Close()
				if l.err != nil {
					l.err = fmt.Errorf("audit: %w", l.err)
				}
				return
			}
			l.add(&rec)
			if len(l.queue) == 0 || len(l.out) >= flushSize {
				l.flush()
			}
		case req := <-l.reopen:
			// What was queued before Reopen belongs in the old file.
			for n := len(l.queue); n > 0; n-- {
				rec, ok := <-l.queue
				if !ok {
					break
				}
				l.add(&rec)
			}
			l.flush()
			req <- l.reopenFile()
		}
	}
}

func (l *Log) add(r *Record) {
	l.out = appendRecord(l.out, r)
	l.pending++
}

func (l *Log) reopenFile() error {
	f, err := openFile(l.path)
	if err != nil {
		l.log.Error("audit: reopen failed; writing on to the old file", "path", l.path, "err", err)
		return err
	}
	old := l.f
	l.f, l.torn = f, false
	if err := old.Close(); err != nil {
		l.log.Error("audit: closing the old file", "path", l.path, "err", err)
	}
	return nil
}

// flush writes out. Records that cannot be written are counted and
// logged; a record cut short is ended with a newline before the next write,
// so it cannot swallow the record after it.
func (l *Log) flush() {
	if len(l.out) == 0 {
		return
	}
	defer func() {
		l.out = l.out[:0]
		l.pending = 0
	}()
	if l.torn {
		if _, err := l.f.Write([]byte{'\n'}); err != nil {
			l.fail(0, err)
			return
		}
		l.torn = false
	}
	l.writing.Store(time.Now().UnixNano())
	n, err := l.f.Write(l.out)
	l.writing.Store(0)
	if err != nil {
		l.fail(n, err)
		return
	}
	l.m.records.Add(float64(l.pending))
	if l.failing {
		l.failing = false
		l.log.Info("audit: writing again", "path", l.path)
	}
}

// fail accounts for a write of out that stopped after n bytes.
func (l *Log) fail(n int, err error) {
	lost := bytes.Count(l.out[n:], []byte{'\n'})
	l.m.records.Add(float64(l.pending - lost))
	l.m.errors.Add(float64(lost))
	if n > 0 && l.out[n-1] != '\n' {
		l.torn = true
	}
	if !l.failing {
		l.failing = true
		l.log.Error("audit: write failed; records are lost until it works again",
			"path", l.path, "lost", lost, "err", err)
	}
}
