package election

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrWatcherRunning is returned by Run when the Watcher is already running.
var ErrWatcherRunning = errors.New("election: watcher already running")

var errWatchLost = errors.New("watch stream lost")

const (
	defaultCheckInterval = 2 * time.Second
	listTimeout          = 5 * time.Second
	minBackoff           = 50 * time.Millisecond
	maxBackoff           = 5 * time.Second
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Prefix is the key prefix elections live under; election <name> is
	// held under "<Prefix>/<name>/". Default DefaultPrefix. It must not end
	// in '/'.
	Prefix string
	// Logger receives the watch's interruptions and recoveries. Nil
	// discards them.
	Logger *slog.Logger
	// OnChange, if set, is called after each change of an election's
	// leader (a new term, a term ending, or the leader's value changing),
	// with the term before and after. Calls are serialised and in the
	// order of the changes; they come from Run's goroutine or from a
	// Verify caller's. OnChange must be cheap and must not block; it may
	// call Term and Terms.
	OnChange func(prev, next Term)
	// CheckInterval is how often Run asks etcd to confirm that the watch is
	// alive (a progress request, after a linearizable read of etcd's
	// revision); a watch that stays silent for one more interval after a
	// request, or whose progress is below that revision (its member cut
	// off from the cluster's quorum answers from what it has), is
	// considered lost, Synced turns false and the prefix is listed again.
	// Default 2s.
	CheckInterval time.Duration
}

// Watcher follows every election under a prefix with one etcd watch and
// keeps each election's current term in memory. Term and Terms are cheap
// enough for every write's hot path; Verify asks etcd when memory is not
// enough. A Watcher is safe for concurrent use.
type Watcher struct {
	client        *clientv3.Client
	prefix        string
	root          string // prefix + "/"
	log           *slog.Logger
	onChange      func(prev, next Term)
	checkInterval time.Duration

	running atomic.Bool
	synced  atomic.Bool
	lists   atomic.Uint64 // successful lists of the prefix, for tests

	// writeMu serialises state changes together with their OnChange
	// calls, so callbacks see changes in order; readers take only mu.
	writeMu sync.Mutex
	mu      sync.RWMutex
	terms   map[string]Term                 // published, guarded by mu
	cands   map[string]map[string]candidate // election -> key -> candidate, guarded by mu
	applied int64                           // revision the watch has applied up to, guarded by mu
	// floor, once etcd's revision went backwards (restored from a backup
	// without --bump-revision), is the highest revision applied before:
	// etcd hands out the numbers up to it again, so a term at or below it
	// may be held by a leader from before the restore as well as one from
	// after, and none is current. Guarded by mu.
	floor int64
	// relist asks Run's session to end and list again: a Verify read
	// found etcd's history gone back (rewound).
	relist chan struct{}

	// testHookBeforeList, if set, runs once the watch is created and
	// before the list at the revision it reports.
	testHookBeforeList func(listRev int64)
	// testHookWatchRev, if set, replaces the revision the watch's
	// creation reports (a member lagging behind).
	testHookWatchRev func(watchRev int64) int64
}

type candidate struct {
	createRev int64
	value     string
}

type change struct{ old, new Term }

// NewWatcher returns a Watcher of the elections under cfg.Prefix. It does
// not contact etcd; Run does.
func NewWatcher(client *clientv3.Client, cfg WatcherConfig) (*Watcher, error) {
	if client == nil {
		return nil, errors.New("election: nil etcd client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := validatePrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.CheckInterval < 0 {
		return nil, fmt.Errorf("election: negative CheckInterval %v", cfg.CheckInterval)
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = defaultCheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Watcher{
		client:        client,
		prefix:        cfg.Prefix,
		root:          cfg.Prefix + "/",
		log:           cfg.Logger,
		onChange:      cfg.OnChange,
		checkInterval: cfg.CheckInterval,
		terms:         make(map[string]Term),
		cands:         make(map[string]map[string]candidate),
		relist:        make(chan struct{}, 1),
	}, nil
}

// Term returns the latest term known in memory for election name; for an
// election never seen, a Term with only Election set. It does not allocate.
func (w *Watcher) Term(name string) Term {
	w.mu.RLock()
	t, ok := w.terms[name]
	w.mu.RUnlock()
	if !ok {
		return Term{Election: name}
	}
	return t
}

// Terms returns the terms of every election seen, sorted by name.
func (w *Watcher) Terms() []Term {
	w.mu.RLock()
	ts := make([]Term, 0, len(w.terms))
	for _, t := range w.terms {
		ts = append(ts, t)
	}
	w.mu.RUnlock()
	slices.SortFunc(ts, func(a, b Term) int { return cmp.Compare(a.Election, b.Election) })
	return ts
}

// Synced reports whether the watch is established and has applied a full
// list of the prefix: the terms in memory follow etcd. It is false before
// Run, while Run reconnects, and after Run returns.
func (w *Watcher) Synced() bool { return w.synced.Load() }

// Fresh reports whether the term of election name in memory follows etcd
// (Synced): while it does not, a term that ended meanwhile still looks
// current, and a write must be judged by a read of etcd (Verify).
func (w *Watcher) Fresh(string) bool { return w.Synced() }

// Run lists the prefix, then watches it, keeping the terms in memory up to
// date, until ctx is done. When the watch is compacted, cancelled or its
// connection lost, Run lists again and resumes, with backoff; Synced is
// false meanwhile. Run returns nil once ctx is done, and ErrWatcherRunning
// if the Watcher is already running.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrWatcherRunning
	}
	defer w.running.Store(false)
	defer w.synced.Store(false)

	var (
		backoff     time.Duration
		outageSince time.Time
	)
	onSynced := func() {
		if !outageSince.IsZero() {
			w.log.Info("election watch resynced", "prefix", w.prefix, "after", time.Since(outageSince).Round(time.Millisecond))
			outageSince = time.Time{}
		}
		backoff = 0
	}
	for {
		err := w.session(ctx, onSynced)
		w.synced.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if outageSince.IsZero() {
			outageSince = time.Now()
			w.log.Warn("election watch interrupted; listing again", "prefix", w.prefix, "err", err)
		} else {
			w.log.Debug("election watch still interrupted", "prefix", w.prefix, "err", err)
		}
		backoff = min(max(2*backoff, minBackoff), maxBackoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// session watches the prefix and lists it, until the watch breaks or ctx
// is done.
func (w *Watcher) session(ctx context.Context, onSynced func()) error {
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	// The watch first, from etcd's current revision, then the list at the
	// revision its creation reports: both are then of the etcd that the
	// watch's one stream reached. Listed first, the list and the watch
	// could come from two etcds, one restored from a backup between
	// them, and the watch's events would be applied over another
	// history's list.
	//
	// A watcher of its own, whose stream is not resumed when it is lost
	// (firstStream): a lost stream ends the session, and memory follows
	// etcd again only after a new list.
	stream := newFirstStream(pb.NewWatchClient(w.client.ActiveConnection()))
	watcher := clientv3.NewWatchFromWatchClient(stream, w.client)
	defer watcher.Close()
	wch := watcher.Watch(wctx, w.root, clientv3.WithPrefix(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	created := time.NewTimer(listTimeout)
	defer created.Stop()
	var listRev int64
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-stream.lost:
		return errWatchLost
	case <-created.C:
		return fmt.Errorf("watch %s not created within %v", w.root, listTimeout)
	case wr, ok := <-wch:
		switch {
		case !ok:
			return errors.New("watch closed")
		case wr.Canceled || wr.Err() != nil:
			return fmt.Errorf("watch canceled: %w", wr.Err())
		case !wr.Created:
			return errors.New("watch answered before it was created")
		}
		listRev = wr.Header.Revision
	}
	if w.testHookWatchRev != nil {
		listRev = w.testHookWatchRev(listRev)
	}
	if w.testHookBeforeList != nil {
		w.testHookBeforeList(listRev)
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	resp, err := w.client.Get(lctx, w.root, clientv3.WithPrefix(), clientv3.WithRev(listRev))
	cancel()
	if err != nil {
		return fmt.Errorf("list %s at revision %d: %w", w.root, listRev, err)
	}
	if stream.ended() {
		return errWatchLost
	}
	// The watch's revision is its member's, which may lag behind the
	// cluster (a follower catching up); the list's header is linearizable.
	// Only that one below what was applied is etcd gone back; a watch
	// behind it is on a member that has not caught up: start again.
	w.mu.RLock()
	applied := w.applied
	w.mu.RUnlock()
	if listRev < applied && resp.Header.Revision >= applied {
		return fmt.Errorf("watch's etcd member is behind (revision %d, %d applied); watching again", listRev, applied)
	}
	w.applyList(listRev, resp.Kvs)
	w.lists.Add(1)
	w.synced.Store(true)
	onSynced()

	check := time.NewTicker(w.checkInterval)
	defer check.Stop()
	heard := true // anything received since the last progress request
	// behind is the cluster's revision read (linearizable) before the
	// last progress request, until the watch shows it is there: a member
	// cut off from the cluster answers progress requests from what it
	// has, so a watch on it is stale, not silent. 0: none pending.
	var behind int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-wch:
			if !ok {
				return errors.New("watch closed")
			}
			if stream.ended() {
				return errWatchLost
			}
			heard = true
			if behind > 0 && wr.Header.Revision >= behind {
				behind = 0
			}
			switch {
			case wr.CompactRevision != 0:
				return fmt.Errorf("watch compacted at revision %d", wr.CompactRevision)
			case wr.Canceled || wr.Err() != nil:
				return fmt.Errorf("watch canceled: %w", wr.Err())
			case wr.IsProgressNotify():
				if behind > 0 {
					return fmt.Errorf("watch's etcd member is behind the cluster (revision %d, the cluster's %d): cut off from it?", wr.Header.Revision, behind)
				}
				w.applyProgress(wr.Header.Revision)
			default:
				w.applyEvents(wr.Events, listRev)
			}
		case <-stream.lost:
			return errWatchLost
		case <-w.relist:
			return errors.New("etcd's revision went backwards")
		case <-check.C:
			if !heard {
				return fmt.Errorf("watch silent for %v after a progress request", w.checkInterval)
			}
			heard = false
			// The cluster's revision now, read with its quorum (from
			// this member or another): the progress answered next must
			// be at it. A member without a quorum answers no such read.
			rctx, cancel := context.WithTimeout(wctx, w.checkInterval)
			rev, err := w.clusterRevision(rctx)
			if err != nil {
				cancel()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("etcd's revision, read with its quorum: %w", err)
			}
			if behind == 0 {
				behind = rev
			}
			// The stream blocks progress requests while it reconnects.
			err = watcher.RequestProgress(rctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("watch progress request: %w", err)
			}
		}
	}
}

// clusterRevision is etcd's revision, read linearizably: as the cluster's
// quorum has it.
func (w *Watcher) clusterRevision(ctx context.Context) (int64, error) {
	resp, err := w.client.Get(ctx, w.root, clientv3.WithCountOnly()) // one key: no range to count
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// applyList replaces the candidates with a full list of the prefix taken at
// revision rev.
func (w *Watcher) applyList(rev int64, kvs []*mvccpb.KeyValue) {
	cands := make(map[string]map[string]candidate)
	for _, kv := range kvs {
		name, ok := splitKey(w.root, string(kv.Key))
		if !ok {
			continue
		}
		if cands[name] == nil {
			cands[name] = make(map[string]candidate)
		}
		cands[name][string(kv.Key)] = candidate{createRev: kv.CreateRevision, value: string(kv.Value)}
	}

	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	// The list is the truth now, whatever came before.
	switch {
	case rev < w.applied:
		w.rewound(w.applied, rev, "etcd revision went backwards")
	case w.applied > 0 && w.diverged(kvs):
		w.rewound(w.applied, rev, "etcd's history changed")
	}
	w.cands = cands
	w.applied = rev
	var changes []change
	for name := range w.terms {
		if _, ok := cands[name]; !ok {
			changes = w.publish(changes, name, rev)
		}
	}
	for name := range cands {
		changes = w.publish(changes, name, rev)
	}
	w.mu.Unlock()
	w.notify(changes)
}

// diverged reports whether a list of the prefix, at a revision not below
// the one applied, holds what the history memory follows cannot have: a
// key created by then that memory does not hold as created then, or a key
// last changed by then whose value memory does not hold. Such a list is of
// another history: etcd restored from a backup without --bump-revision
// that had passed the revision applied before fencegate listed it. w.mu
// must be held.
func (w *Watcher) diverged(kvs []*mvccpb.KeyValue) bool {
	for _, kv := range kvs {
		if kv.CreateRevision > w.applied {
			continue
		}
		name, ok := splitKey(w.root, string(kv.Key))
		if !ok {
			continue
		}
		c, ok := w.cands[name][string(kv.Key)]
		if !ok || c.createRev != kv.CreateRevision || (kv.ModRevision <= w.applied && c.value != string(kv.Value)) {
			return true
		}
	}
	return false
}

// rewound records that etcd's history went back (restored from a backup)
// from revision had to now: every term up to had is refused, and any later
// read may be published. w.mu must be held.
func (w *Watcher) rewound(had, now int64, what string) {
	w.floor = max(w.floor, had)
	w.applied = now
	w.log.Warn(what+" (restored without --bump-revision?): terms up to the revision before are refused, as leaders from before and after the restore may hold the same one; leaders holding one must campaign again",
		"prefix", w.prefix, "had", had, "now", now)
	for name, t := range w.terms {
		t.ObservedRev = 0
		w.terms[name] = t
	}
}

func (w *Watcher) applyProgress(rev int64) {
	w.mu.Lock()
	w.applied = max(w.applied, rev)
	w.mu.Unlock()
}

// applyEvents applies watch events after revision since (the list's: the
// watch starts at a revision the list may already hold), resolving the
// leaders of the elections touched at each revision, so a leader that
// lasted a single revision is still reported.
func (w *Watcher) applyEvents(evs []*clientv3.Event, since int64) {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	var (
		changes []change
		touched []string
		rev     int64
	)
	flush := func() {
		for _, name := range touched {
			changes = w.publish(changes, name, rev)
		}
		touched = touched[:0]
	}
	for _, ev := range evs {
		if ev.Kv.ModRevision <= since {
			continue
		}
		if ev.Kv.ModRevision != rev {
			flush()
			rev = ev.Kv.ModRevision
		}
		key := string(ev.Kv.Key)
		name, ok := splitKey(w.root, key)
		if !ok {
			continue
		}
		switch ev.Type {
		case clientv3.EventTypePut:
			if w.cands[name] == nil {
				w.cands[name] = make(map[string]candidate)
			}
			w.cands[name][key] = candidate{createRev: ev.Kv.CreateRevision, value: string(ev.Kv.Value)}
		case clientv3.EventTypeDelete:
			delete(w.cands[name], key)
			if len(w.cands[name]) == 0 {
				delete(w.cands, name)
			}
		}
		if !slices.Contains(touched, name) {
			touched = append(touched, name)
		}
	}
	flush()
	w.applied = max(w.applied, rev)
	w.mu.Unlock()
	w.notify(changes)
}

// publish resolves election name's leader from its candidates as of
// revision rev and publishes it unless a newer state is published. The
// leader is the candidate with the lowest create revision (ties: lowest
// key), as in etcd's concurrency.Election. w.mu must be held.
func (w *Watcher) publish(changes []change, name string, rev int64) []change {
	var (
		leader    candidate
		leaderKey string
	)
	for key, c := range w.cands[name] {
		if leaderKey == "" || c.createRev < leader.createRev || (c.createRev == leader.createRev && key < leaderKey) {
			leader, leaderKey = c, key
		}
	}
	return w.set(changes, name, rev, leaderKey, leader)
}

// set publishes that election name's leader at revision rev is the
// candidate key (none when key is empty), unless a state observed at rev or
// later is published already. w.mu must be held.
func (w *Watcher) set(changes []change, name string, rev int64, key string, c candidate) []change {
	if key != "" && c.createRev <= w.floor {
		// A term etcd handed out twice: held by no one as far as
		// fencegate knows (floor). Last still learns it, so it reads
		// as ended.
		if t, ok := w.terms[name]; ok && c.createRev > t.Last {
			t.Last = c.createRev
			w.terms[name] = t
		}
		key, c = "", candidate{}
	}
	old, known := w.terms[name]
	if !known {
		if key == "" {
			return changes // nothing to say about an election never seen
		}
		old = Term{Election: name}
	}
	if rev <= old.ObservedRev {
		// Too old to publish (a Verify read published a later state), but
		// its leader held a term: Last must know it, or that term, once
		// ended, would read as one no leader ever held.
		if known && c.createRev > old.Last {
			old.Last = c.createRev
			w.terms[name] = old
		}
		return changes
	}
	t := old
	t.ObservedRev = rev
	t.Rev, t.Leader, t.Key = c.createRev, c.value, key
	if t.Rev != old.Rev {
		t.Changes++
	}
	t.Last = max(t.Last, t.Rev)
	w.terms[name] = t
	if t.Rev != old.Rev || t.Leader != old.Leader || t.Key != old.Key {
		changes = append(changes, change{old, t})
	}
	return changes
}

// notify calls OnChange for changes. w.writeMu must be held, w.mu not.
func (w *Watcher) notify(changes []change) {
	if w.onChange == nil {
		return
	}
	for _, c := range changes {
		w.onChange(c.old, c.new)
	}
}

// Verify reads election name's leader from etcd with a linearizable read
// and reports whether token is a term of the election: the current
// leader's, or, when the election has no leader and token is above every
// term seen, the create revision of a key of the election (an ended term
// the watch has not delivered; a key that never became leader cannot be
// told apart from one that did). A newer answer than memory's is folded into
// the Watcher's state. For an invalid name, Verify reports no leader and
// held false. It returns an error only when etcd cannot answer, including
// when ctx is done first.
func (w *Watcher) Verify(ctx context.Context, name string, token int64) (Term, bool, error) {
	if ValidateName(name) != nil {
		return Term{Election: name}, false, nil
	}
	pfx := electionKeyPrefix(w.prefix, name)
	w.mu.RLock()
	applied := w.applied
	w.mu.RUnlock()
	resp, err := w.client.Get(ctx, pfx, clientv3.WithFirstCreate()...)
	if err != nil {
		return Term{}, false, fmt.Errorf("election: verify %q: %w", name, err)
	}
	if rev := resp.Header.Revision; rev < applied {
		// A linearizable read sees every revision the watch applied
		// before it started: etcd's history went backwards. Memory is
		// of the history before; the watch may not notice for a while
		// (it resumes above the new store's revision).
		w.writeMu.Lock()
		w.mu.Lock()
		if rev < w.applied {
			w.rewound(w.applied, rev, "etcd revision went backwards")
		}
		w.mu.Unlock()
		w.writeMu.Unlock()
		select {
		case w.relist <- struct{}{}:
		default:
		}
	}
	t := w.fold(name, resp)
	w.mu.RLock()
	floor := w.floor
	w.mu.RUnlock()
	switch {
	case t.HasLeader():
		return t, token == t.Rev, nil
	case token <= t.Last || token > resp.Header.Revision || token <= floor:
		return t, false, nil
	}
	held, err := w.created(ctx, pfx, token)
	if err != nil {
		return Term{}, false, fmt.Errorf("election: verify %q: %w", name, err)
	}
	return t, held, nil
}

// fold publishes a linearizable first-create read of an election if it is
// newer than what is published, and returns the election's term.
func (w *Watcher) fold(name string, resp *clientv3.GetResponse) Term {
	rev := resp.Header.Revision
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	var changes []change
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		changes = w.set(changes, name, rev, string(kv.Key), candidate{createRev: kv.CreateRevision, value: string(kv.Value)})
	} else {
		changes = w.set(changes, name, rev, "", candidate{})
	}
	t, ok := w.terms[name]
	w.mu.Unlock()
	w.notify(changes)
	if !ok {
		return Term{Election: name, ObservedRev: rev}
	}
	return t
}

// created reports whether a key under pfx was created at revision rev.
func (w *Watcher) created(ctx context.Context, pfx string, rev int64) (bool, error) {
	resp, err := w.client.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(rev),
		clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev), clientv3.WithKeysOnly())
	if errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrCompacted) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == rev {
			return true, nil
		}
	}
	return false, nil
}
