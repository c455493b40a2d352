package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type logFixture struct {
	path string
	log  *Log
	reg  *prometheus.Registry
	logs *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func openFixture(t *testing.T, path string, buffer int) *logFixture {
	t.Helper()
	f := &logFixture{path: path, reg: prometheus.NewRegistry(), logs: &lockedBuffer{}}
	l, err := Open(path, Options{
		Logger:     slog.New(slog.NewTextHandler(f.logs, nil)),
		Registerer: f.reg,
		Buffer:     buffer,
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	f.log = l
	t.Cleanup(func() { _ = l.Close() })
	return f
}

func record(i int) *Record {
	r := sampleRecord()
	r.RequestID = fmt.Sprintf("req-%d", i)
	r.Token = uint64(i)
	return &r
}

// readRecords decodes every line of path, failing on any line that is not
// one whole record.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r Record
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s does not end in a newline", path)
	}
	return recs
}

func TestWriteRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	f := openFixture(t, path, 0)
	var want []Record
	for i := range 50 {
		r := record(i)
		r.Fence = hostile[i%len(hostile)]
		r.Fence = string([]rune(r.Fence)) // what any JSON reader gets back
		f.log.Write(r)
		want = append(want, *r)
	}
	if err := f.log.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := readRecords(t, path)
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if !got[i].Time.Equal(want[i].Time) {
			t.Errorf("record %d: time %v, want %v", i, got[i].Time, want[i].Time)
		}
		got[i].Time, want[i].Time = time.Time{}, time.Time{}
		if got[i] != want[i] {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("mode = %v, want 0600", got)
	}
	if got := testutil.ToFloat64(f.log.m.records); got != 50 {
		t.Errorf("fencegate_audit_records_total = %v, want 50", got)
	}
}

func TestWriteAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	for i := range 2 {
		f := openFixture(t, path, 0)
		f.log.Write(record(i))
		if err := f.log.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(readRecords(t, path)); got != 2 {
		t.Errorf("records after two opens = %d, want 2", got)
	}
}

func TestWriteFillsZeroTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	f := openFixture(t, path, 0)
	before := time.Now()
	f.log.Write(&Record{Outcome: "accepted"})
	if err := f.log.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, path)
	if len(recs) != 1 || recs[0].Time.Before(before.Truncate(time.Second)) {
		t.Errorf("records = %+v, want one with the time of writing", recs)
	}
}

// TestReopen rotates the file as logrotate does, while writers keep
// writing: every record lands in one of the two files, and everything
// written after Reopen returned is in the new one.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	rotated := path + ".1"
	f := openFixture(t, path, 8)

	const writers, perWriter = 4, 500
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				f.log.Write(record(w*perWriter + i))
			}
		})
	}
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := f.log.Reopen(); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	wg.Wait()
	const after = 10
	for i := range after {
		f.log.Write(record(writers*perWriter + i))
	}
	if err := f.log.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	old, cur := readRecords(t, rotated), readRecords(t, path)
	seen := make(map[string]int)
	for _, r := range append(old, cur...) {
		seen[r.RequestID]++
	}
	for i := range writers*perWriter + after {
		if id := fmt.Sprintf("req-%d", i); seen[id] != 1 {
			t.Errorf("%s written %d times, want once", id, seen[id])
		}
	}
	if len(cur) < after {
		t.Fatalf("new file holds %d records, want at least the %d written after Reopen", len(cur), after)
	}
	for i, r := range cur[len(cur)-after:] {
		if want := fmt.Sprintf("req-%d", writers*perWriter+i); r.RequestID != want {
			t.Errorf("new file record %d = %s, want %s", len(cur)-after+i, r.RequestID, want)
		}
	}
	t.Logf("rotated file %d records, new file %d", len(old), len(cur))
}

func TestReopenFailureKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "logs")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	f := openFixture(t, filepath.Join(sub, "audit.log"), 0)
	f.log.Write(record(0))
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(sub, moved); err != nil {
		t.Fatal(err)
	}
	if err := f.log.Reopen(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Reopen with the directory gone: error %v, want one matching os.ErrNotExist", err)
	}
	f.log.Write(record(1))
	if err := f.log.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(readRecords(t, filepath.Join(moved, "audit.log"))); got != 2 {
		t.Errorf("old file holds %d records, want 2", got)
	}
	if err := f.log.Reopen(); !errors.Is(err, ErrClosed) {
		t.Errorf("Reopen after Close: error %v, want ErrClosed", err)
	}
}

func TestCloseFlushes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	f := openFixture(t, path, 0)
	const n = 2000 // several writes' worth
	for i := range n {
		f.log.Write(record(i))
	}
	if err := f.log.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := len(readRecords(t, path)); got != n {
		t.Errorf("after Close the file holds %d records, want %d", got, n)
	}
	if err := f.log.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: error %v, want ErrClosed", err)
	}
	f.log.Write(record(n))
	if got := testutil.ToFloat64(f.log.m.errors); got != 1 {
		t.Errorf("write after Close: fencegate_audit_write_errors_total = %v, want 1", got)
	}
	if !strings.Contains(f.logs.String(), "record written after Close") {
		t.Errorf("log = %q, want the write after Close reported", f.logs.String())
	}
}

// TestConcurrentWrite runs many writers against a tiny queue: they block,
// the block is counted, and no record is lost or torn.
func TestConcurrentWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	f := openFixture(t, path, 1)
	const writers, perWriter = 8, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				r := record(w*perWriter + i)
				r.Fence = hostile[i%len(hostile)]
				f.log.Write(r)
			}
		})
	}
	wg.Wait()
	if err := f.log.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(readRecords(t, path)); got != writers*perWriter {
		t.Errorf("file holds %d records, want %d", got, writers*perWriter)
	}
	if got := testutil.ToFloat64(f.log.m.records); got != writers*perWriter {
		t.Errorf("fencegate_audit_records_total = %v, want %d", got, writers*perWriter)
	}
	if got := testutil.ToFloat64(f.log.m.blocked); got == 0 {
		t.Errorf("fencegate_audit_blocked_total = 0 with %d writers on a queue of 1, want > 0", writers)
	}
}

// TestWriteErrors writes to a device that is always full: each lost record
// is counted, and the failure is logged once, not once per record.
func TestWriteErrors(t *testing.T) {
	f := openFixture(t, "/dev/full", 0)
	for i := range 10 {
		f.log.Write(record(i))
	}
	if err := f.log.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := testutil.ToFloat64(f.log.m.errors); got != 10 {
		t.Errorf("fencegate_audit_write_errors_total = %v, want 10", got)
	}
	if got := testutil.ToFloat64(f.log.m.records); got != 0 {
		t.Errorf("fencegate_audit_records_total = %v, want 0", got)
	}
	if got := strings.Count(f.logs.String(), "audit: write failed"); got != 1 {
		t.Errorf("log = %q: %d write failures reported, want 1", f.logs.String(), got)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "audit.log")
	tests := []struct {
		name string
		path string
		opts Options
		want string
	}{
		{"no directory", missing, Options{}, "audit: open " + missing + ": no such file or directory"},
		{"a directory", dir, Options{}, "audit: open " + dir + ": is a directory"},
		{"negative buffer", filepath.Join(dir, "a.log"), Options{Buffer: -1}, "audit: buffer -1: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Open(tt.path, tt.opts)
			if err == nil {
				l.Close()
				t.Fatalf("Open = nil error, want %q", tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Open error = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "a.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open with a bad option created the file: %v", err)
	}
}

func TestMetricsRegistered(t *testing.T) {
	f := openFixture(t, filepath.Join(t.TempDir(), "audit.log"), 0)
	n, err := testutil.GatherAndCount(f.reg, "fencegate_audit_records_total",
		"fencegate_audit_write_errors_total", "fencegate_audit_blocked_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("series = %d, want 3", n)
	}
}

func BenchmarkWrite(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "audit.log"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := sampleRecord()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Write(&r)
		}
	})
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

// TestReadyWhileAWriteHangs: a write to the file that does not return (a
// FIFO nobody reads, as a hung disk would) makes Ready report the log
// stuck after StuckAfter, and ready again once the write went through.
func TestReadyWhileAWriteHangs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	// A reader, so that opening for writing does not wait; it reads
	// nothing until the end.
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{Buffer: 4, StuckAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ready(); err != nil {
		t.Fatalf("a fresh log: got %v, want ready", err)
	}
	big := record(0)
	big.Principal = strings.Repeat("p", 1<<17) // more than the pipe holds
	done := make(chan struct{})
	go func() { defer close(done); l.Write(big) }()
	<-done // queued; the writer hangs on the pipe
	deadline := time.Now().Add(10 * time.Second)
	for l.Ready() == nil {
		if time.Now().After(deadline) {
			t.Fatal("Ready kept reporting ready while a write hung for 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.Ready(); !strings.Contains(err.Error(), "one write has taken") {
		t.Fatalf("got %v, want the stuck write named", err)
	}
	// The disk comes back: drain the pipe.
	drained := make(chan struct{})
	go func() { defer close(drained); _, _ = io.Copy(io.Discard, r) }()
	defer func() { l.Close(); r.Close(); <-drained }()
	for deadline = time.Now().Add(10 * time.Second); l.Ready() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not ready 10s after the pipe drained: %v", l.Ready())
		}
	}
}
