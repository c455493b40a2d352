package auth

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// checkEvery bounds how often the files are stat'ed on the request path.
const checkEvery = time.Second

// Option adjusts NewServerTLS and NewAuthenticator.
type Option func(*options)

type options struct {
	reg   prometheus.Registerer
	now   func() time.Time
	check func(flag, path string) error
}

// WithRegisterer registers the reload error counter
// (fencegate_tls_reload_errors_total or
// fencegate_token_file_reload_errors_total) on reg.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.reg = reg }
}

// WithClock replaces time.Now for deciding when the files are stat'ed
// again; tests use it to cross the once-a-second bound without sleeping.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithFileCheck has check judge each file, named by its flag
// (--cert-file, --key-file, --trusted-ca-file, --token-auth-file), before
// it is read, at start and at every reload: an error refuses the file as
// one that cannot be read would be (at start, the error is
// NewServerTLS's or NewAuthenticator's; at a reload, the previous
// material stays). fencegate's checks the file's mode.
func WithFileCheck(check func(flag, path string) error) Option {
	return func(o *options) { o.check = check }
}

// checkFiles runs o's file check, if any, on each flag and path pair.
func (o options) checkFiles(flagsAndPaths ...string) error {
	if o.check == nil {
		return nil
	}
	for i := 0; i+1 < len(flagsAndPaths); i += 2 {
		if flagsAndPaths[i+1] == "" {
			continue
		}
		if err := o.check(flagsAndPaths[i], flagsAndPaths[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

func buildOptions(opts []Option) options {
	o := options{now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// stamp is what tells a changed file apart: replaced files (a rename, a
// Kubernetes secret's symlink swap) get a new inode, edited ones a new
// mtime or size, and the content's hash catches an edit in place that
// keeps both (the same length, within one tick of the file system's
// clock, or with the time set back): a revoked secret must not stay
// valid. The mode tells a file made safe again by chmod (see
// WithFileCheck). The files are small (certificates, keys, a token list),
// read at most once a second.
type stamp struct {
	mod  time.Time
	size int64
	ino  uint64
	perm fs.FileMode
	sum  [sha256.Size]byte
	err  bool
}

// maxStampBytes bounds what stampOf reads of a file to hash it; a larger
// file is told apart by its stat alone.
const maxStampBytes = 1 << 20

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{err: true}
	}
	st := stamp{mod: fi.ModTime(), size: fi.Size(), ino: inode(fi), perm: fi.Mode().Perm()}
	if fi.Size() <= maxStampBytes {
		if b, err := os.ReadFile(path); err == nil {
			st.sum = sha256.Sum256(b)
		}
	}
	return st
}

// reloader holds what was loaded from some files and loads it again when
// they change. Readers never wait: at most one of them stats the files, at
// most once per checkEvery, and the others use the current value.
type reloader[T any] struct {
	files []string
	load  func() (*T, error)
	now   func() time.Time
	log   *slog.Logger
	errs  prometheus.Counter // nil without a registerer
	what  string
	// swapping, if set, runs before a value loaded replaces old (nil at
	// start), under mu.
	swapping func(old, cur *T)
	cur      atomic.Pointer[T]
	// nextAt is when the files are next stat'ed: a time.Time, not Unix
	// nanoseconds, so that time.Now's monotonic reading decides it and a
	// wall clock stepped back does not put the look off (due).
	nextAt atomic.Pointer[time.Time]

	mu     sync.Mutex // one load at a time; guards stamps
	stamps []stamp
}

// start loads the files for the first time; an error here is start-up's.
func (r *reloader[T]) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stamps = r.stat()
	v, err := r.load()
	if err != nil {
		return err
	}
	r.store(v)
	r.lookedAt(r.now())
	return nil
}

// get returns the current value, first loading it again if the files
// changed and a second has passed since the last look.
func (r *reloader[T]) get() *T {
	if r.due(r.now()) && r.mu.TryLock() {
		// Read again under the lock: a time read before another's look
		// would seem to have gone back.
		if now := r.now(); r.due(now) {
			r.lookedAt(now)
			_ = r.reloadLocked(false)
		}
		r.mu.Unlock()
	}
	return r.cur.Load()
}

// due says the files are to be stat'ed at now: checkEvery has passed
// since the last look, or the clock went back before it. time.Now's
// monotonic reading does not go back; a clock without one (WithClock's)
// may be stepped back, and a revoked token or CA must not stay in use
// until it has caught up.
func (r *reloader[T]) due(now time.Time) bool {
	next := *r.nextAt.Load()
	return !now.Before(next) || now.Before(next.Add(-checkEvery))
}

func (r *reloader[T]) lookedAt(now time.Time) {
	next := now.Add(checkEvery)
	r.nextAt.Store(&next)
}

// reload loads the files again, changed or not (SIGHUP).
func (r *reloader[T]) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked(true)
}

func (r *reloader[T]) reloadLocked(force bool) error {
	st := r.stat()
	if !force && slices.Equal(st, r.stamps) {
		return nil
	}
	// Remember the stamps even when the load fails, so a broken file is
	// reported once, not every second, and loaded when it changes again.
	r.stamps = st
	v, err := r.load()
	if err != nil {
		if r.errs != nil {
			r.errs.Inc()
		}
		r.log.Error("auth: "+r.what+" not reloaded, keeping the previous one", "err", err)
		return err
	}
	r.store(v)
	r.log.Info("auth: "+r.what+" reloaded", "files", r.files)
	return nil
}

// store puts v in force; under mu.
func (r *reloader[T]) store(v *T) {
	if r.swapping != nil {
		r.swapping(r.cur.Load(), v)
	}
	r.cur.Store(v)
}

func (r *reloader[T]) stat() []stamp {
	st := make([]stamp, len(r.files))
	for i, f := range r.files {
		st[i] = stampOf(f)
	}
	return st
}

// readFile reads path for flag; its error is one line naming both.
func readFile(flag, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fileError(flag, path, err)
	}
	return b, nil
}

// fileError says what is wrong with path, the value of flag, without
// repeating the path an *fs.PathError already carries.
func fileError(flag, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &FileError{Flag: flag, Path: path, Err: err}
}

// FileError is a file given to fencegate that cannot be used.
type FileError struct {
	Flag string // --cert-file
	Path string
	Err  error
}

func (e *FileError) Error() string { return e.Flag + " " + e.Path + ": " + e.Err.Error() }

func (e *FileError) Unwrap() error { return e.Err }
