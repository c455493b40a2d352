package resp

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// aheadSize is the buffer a connection's bytes are read ahead into, and
// the most of a burst's buffer an idle connection keeps.
const aheadSize = 16 << 10

// aheadAfter is how long a write to the client may wait before the
// connection is read ahead: a client that reads its replies takes a
// write at once, and its session then reads the connection itself.
const aheadAfter = time.Millisecond

// readAhead is a connection as its session reads it. The session runs
// commands and writes their replies on its goroutine, and reads the
// connection itself; once a write has waited aheadAfter for a client that
// reads no replies (yet), a goroutine of readAhead's reads the
// connection until the write is done, and holds what arrives, up to a
// bound. The client's further commands are read and held, not run: a
// client that writes its whole pipeline before it reads (go-redis
// Pipelined) finishes writing and then reads, where the two would
// otherwise block in their writes until WriteTimeout; and a client that
// stopped reading gets nothing more run whose reply it would not read.
type readAhead struct {
	src   io.Reader
	timer *time.Timer // hands reading to the goroutine (takeOver)
	// writing: the session is in a write to the client.
	writing atomic.Bool

	mu   sync.Mutex
	cond sync.Cond // on mu: pumping, bytes or an error, room, stopped
	// pumping: the goroutine reads src; the session waits for what it
	// reads. It stops once a read returns with no write in progress.
	pumping bool
	// buf[off:] is read and not yet taken. While direct, the goroutine
	// reads into buf's free end without mu; nothing but off moves then.
	buf    []byte
	off    int
	direct bool
	chunk  []byte // read into while buf holds a burst too large to keep
	limit  int    // most bytes held before the goroutine stops reading
	full   bool   // the goroutine waits for room
	// err ended the goroutine's read: a timeout is given to the session
	// once and reading goes on (the session decides what it means); any
	// other error ends reading.
	err     error
	started bool // run was started (takeOver)
	stopped bool
	done    chan struct{}
}

func newReadAhead(src io.Reader, limit int) *readAhead {
	a := &readAhead{src: src, limit: limit, done: make(chan struct{})}
	a.cond.L = &a.mu
	a.timer = time.AfterFunc(time.Hour, a.takeOver)
	a.timer.Stop()
	return a
}

// takeOver has the goroutine read, starting it the first time, if the
// write that armed the timer still waits.
func (a *readAhead) takeOver() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.writing.Load() || a.pumping || a.stopped {
		return
	}
	a.pumping = true
	if !a.started {
		a.started = true
		go a.run()
	}
	a.cond.Broadcast()
}

// writer returns w, whose writes, once they wait aheadAfter, have the
// connection read ahead.
func (a *readAhead) writer(w io.Writer) io.Writer { return aheadWriter{w: w, a: a} }

type aheadWriter struct {
	w io.Writer
	a *readAhead
}

func (w aheadWriter) Write(p []byte) (int, error) {
	w.a.writing.Store(true)
	w.a.timer.Reset(aheadAfter)
	n, err := w.w.Write(p)
	w.a.timer.Stop()
	w.a.writing.Store(false)
	return n, err
}

// run reads ahead whenever a write waits, until the connection fails or
// stop; takeOver starts it on a goroutine of its own the first time.
func (a *readAhead) run() {
	defer close(a.done)
	for {
		a.mu.Lock()
		for !a.stopped && (!a.pumping || a.err != nil || len(a.buf)-a.off >= a.limit) {
			a.full = a.pumping && a.err == nil
			a.cond.Wait()
		}
		a.full = false
		if a.stopped {
			a.mu.Unlock()
			return
		}
		into := a.space()
		a.mu.Unlock()

		n, err := a.src.Read(into)

		a.mu.Lock()
		if a.direct {
			a.buf = a.buf[:len(a.buf)+n]
		} else {
			a.buf = append(a.buf, a.chunk[:n]...)
		}
		a.direct = false
		a.err = err
		if !a.writing.Load() {
			a.pumping = false // the session reads again
		}
		a.cond.Broadcast()
		a.mu.Unlock()
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
	}
}

// space returns where the next read goes, under mu: straight into buf
// while it is small, else into chunk, so that a connection gone idle
// after a burst does not keep the burst's buffer (Read lets it go).
func (a *readAhead) space() []byte {
	unread := len(a.buf) - a.off
	if cap(a.buf) <= aheadSize && unread <= aheadSize/2 {
		if cap(a.buf) < aheadSize {
			b := make([]byte, unread, aheadSize)
			copy(b, a.buf[a.off:])
			a.buf = b
		} else {
			a.buf = a.buf[:copy(a.buf, a.buf[a.off:])]
		}
		a.off, a.direct, a.chunk = 0, true, nil
		return a.buf[len(a.buf):cap(a.buf)]
	}
	if a.chunk == nil {
		a.chunk = make([]byte, aheadSize)
	}
	return a.chunk
}

// Read takes what was read ahead, or waits for the goroutine's read in
// progress, or reads the connection.
func (a *readAhead) Read(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.off == len(a.buf) && a.err == nil {
		if !a.pumping {
			// The goroutine reads nothing until the next write waits,
			// which this goroutine would be making.
			a.mu.Unlock()
			n, err := a.src.Read(p)
			a.mu.Lock()
			return n, err
		}
		a.cond.Wait()
	}
	if a.off < len(a.buf) {
		n := copy(p, a.buf[a.off:])
		a.off += n
		if a.off == len(a.buf) && !a.direct && cap(a.buf) > aheadSize {
			a.buf, a.off = nil, 0
		}
		a.cond.Broadcast()
		return n, nil
	}
	err := a.err
	if errors.Is(err, os.ErrDeadlineExceeded) {
		a.err = nil
		a.cond.Broadcast()
	}
	return 0, err
}

// waiting returns how many bytes were read and not yet taken.
func (a *readAhead) waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.buf) - a.off
}

// setLimit sets the most bytes held.
func (a *readAhead) setLimit(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limit = n
	a.cond.Broadcast()
}

// atLimit reports whether reading has stopped at the limit.
func (a *readAhead) atLimit() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.full
}

// stop ends run and waits for it; a read in progress must be made to
// return first, by closing the connection.
func (a *readAhead) stop() {
	a.timer.Stop()
	a.mu.Lock()
	a.stopped = true
	started := a.started
	a.cond.Broadcast()
	a.mu.Unlock()
	if started {
		<-a.done
	}
}
