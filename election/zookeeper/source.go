package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election"
)

// DefaultRoot is the znode elections live under when none is configured:
// election <name> is the znode "<root>/<name>".
const DefaultRoot = "/fencegate/elections"

// DefaultSessionTimeout is the ZooKeeper session timeout asked for when
// none is configured.
const DefaultSessionTimeout = 10 * time.Second

// DefaultMaxElections bounds the elections watched when none is configured.
const DefaultMaxElections = 10000

const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// A silent link (packets dropped, nothing reset) is seen by go-zookeeper
// only when its read deadline passes, two thirds of the session timeout
// after the last packet. Run asks ZooKeeper for a stat of the root every
// heartbeatInterval, and memory counts as fresh only while ZooKeeper
// answered within freshWindow: as the etcd watcher's progress check.
const (
	heartbeatInterval = time.Second
	freshWindow       = 3 * time.Second
)

// seqDigits is how many digits ZooKeeper appends to a sequential node.
const seqDigits = 10

// Config configures a Source.
type Config struct {
	// Servers are ZooKeeper's host:port addresses. Required.
	Servers []string
	// Root is the znode elections live under; election <name> is the znode
	// "<Root>/<name>". Default DefaultRoot. It must start with '/' and not
	// end with one.
	Root string
	// SessionTimeout is the ZooKeeper session timeout asked for (the
	// server bounds it between 2 and 20 ticks). Default 10s.
	SessionTimeout time.Duration
	// MaxElections bounds how many elections are watched. Default
	// DefaultMaxElections.
	MaxElections int
	// Logger receives session changes and watch errors. Nil discards them.
	Logger *slog.Logger
	// OnChange, if set, is called after each change of an election's
	// leader, with the term before and after. It must be cheap and must
	// not block.
	OnChange func(prev, next election.Term)
}

// Source follows ZooKeeper elections. It is an election.Source; Term is
// cheap enough for every write's hot path. A Source is safe for concurrent
// use.
type Source struct {
	conn     *zk.Conn
	root     string
	log      *slog.Logger
	onChange func(prev, next election.Term)
	max      int

	// pubMu serialises publications with their OnChange calls; readers
	// take only mu.
	pubMu sync.Mutex
	mu    sync.RWMutex
	terms map[string]election.Term // guarded by mu
	// sessions counts the connections established (a session made or
	// resumed); readAt holds, for each election, the count its last read
	// began in. An election is fresh only when read in the current
	// connection: what changed while fencegate was cut off is not in
	// memory until then.
	sessions atomic.Uint64
	readAt   map[string]uint64 // guarded by mu
	// failing are the elections whose watch's last read failed (a
	// leader's node fencegate may not read, an election node gone
	// unreadable, a lost connection): memory cannot tell what changed,
	// so they are not fresh until the watch reads them again.
	failing map[string]bool // guarded by mu
	// floor, once ZooKeeper's history was seen going back (restored from
	// a backup, rebuilt, replaced behind the same address), is the
	// highest zxid read before: the zxids up to it may be handed out
	// again, so a term at or below it may be held by a leader from
	// before as well as one from after, and none is current. highConn is
	// the newest connection a read was published from; high the highest
	// zxid read in it, highBefore in the connections before. Guarded by
	// mu.
	floor, high, highBefore int64
	highConn                uint64
	// heard is when ZooKeeper last answered (a session established, a
	// read, Run's heartbeat), in Unix nanoseconds.
	heard atomic.Int64
	// reads numbers reads in the order their first request is sent, for
	// reads of one election: readMu (by the election's hash) holds the
	// numbering and the request together. pubSeq holds, for each
	// election, the number of the last read published.
	reads  atomic.Uint64
	readMu [1024]sync.Mutex
	seed   maphash.Seed
	pubSeq map[string]uint64 // guarded by mu; made by publish
	// reread is closed, and replaced, when a connection is established:
	// each watch reads its election again (kick).
	rereadMu sync.Mutex
	reread   chan struct{}
	// watched are the elections with a watch, started or asked for.
	watched map[string]bool // guarded by mu
	wantCh  chan string     // elections to start watching, for Run
}

// New connects to ZooKeeper (in the background: New does not wait for a
// session) and returns a Source of the elections under cfg.Root. Run
// watches them; Close ends the session.
func New(cfg Config) (*Source, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("zookeeper: no servers")
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if !strings.HasPrefix(cfg.Root, "/") || (len(cfg.Root) > 1 && strings.HasSuffix(cfg.Root, "/")) || cfg.Root == "/" {
		return nil, fmt.Errorf("zookeeper: election root %q: want a znode path such as %s", cfg.Root, DefaultRoot)
	}
	if cfg.SessionTimeout < 0 {
		return nil, fmt.Errorf("zookeeper: negative session timeout %v", cfg.SessionTimeout)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxElections <= 0 {
		cfg.MaxElections = DefaultMaxElections
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log := cfg.Logger
	s := &Source{
		root:     cfg.Root,
		log:      log,
		onChange: cfg.OnChange,
		max:      cfg.MaxElections,
		terms:    make(map[string]election.Term),
		watched:  make(map[string]bool),
		wantCh:   make(chan string, 256),
		readAt:   make(map[string]uint64),
		failing:  make(map[string]bool),
		seed:     maphash.MakeSeed(),
		reread:   make(chan struct{}),
	}
	conn, _, err := zk.Connect(cfg.Servers, cfg.SessionTimeout,
		zk.WithLogger(zkLogger{log}), zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession {
				log.Debug("zookeeper session", "state", ev.State.String(), "server", ev.Server)
				if ev.State == zk.StateHasSession {
					s.heard.Store(time.Now().UnixNano())
					s.sessions.Add(1)
					s.kick()
				}
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	s.conn = conn
	return s, nil
}

// kick makes every watch read its election again.
func (s *Source) kick() {
	s.rereadMu.Lock()
	close(s.reread)
	s.reread = make(chan struct{})
	s.rereadMu.Unlock()
}

func (s *Source) rereadCh() <-chan struct{} {
	s.rereadMu.Lock()
	defer s.rereadMu.Unlock()
	return s.reread
}

// Fresh reports whether the term of election name in memory is current
// as far as the source knows: the session is established, ZooKeeper
// answered within freshWindow, the election was read since the
// connection was, and its watch's last read succeeded. Cut off from
// ZooKeeper, or unable to read the election, memory may hold a term that
// ended meanwhile, and would let its zombie through for as long as that
// lasts; the gateway reads such a fence before each write instead
// (election.Freshness).
func (s *Source) Fresh(name string) bool {
	if !s.Connected() || time.Since(time.Unix(0, s.heard.Load())) > freshWindow {
		return false
	}
	n := s.sessions.Load()
	s.mu.RLock()
	at, failing := s.readAt[name], s.failing[name]
	s.mu.RUnlock()
	return at == n && !failing
}

// zkLogger sends the client's own log lines to slog, at debug level: they
// are reconnection chatter that Connected and the watch errors summarise.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// Close ends the ZooKeeper session. It is idempotent.
func (s *Source) Close() { s.conn.Close() }

// Connected reports whether the ZooKeeper session is established: while it
// is not, the terms in memory may be behind.
func (s *Source) Connected() bool { return s.conn.State() == zk.StateHasSession }

// Term returns the term known in memory for election name; for an election
// never verified, a Term with only Election set. It does not allocate.
func (s *Source) Term(name string) election.Term {
	s.mu.RLock()
	t, ok := s.terms[name]
	s.mu.RUnlock()
	if !ok {
		return election.Term{Election: name}
	}
	return t
}

// Terms returns the terms of every election followed, sorted by name.
func (s *Source) Terms() []election.Term {
	s.mu.RLock()
	ts := slices.AppendSeq(make([]election.Term, 0, len(s.terms)), maps.Values(s.terms))
	s.mu.RUnlock()
	slices.SortFunc(ts, election.CompareTerms)
	return ts
}

// Run watches the elections Verify has been asked about until ctx is done;
// then it ends the session (as Close does) and returns nil. Watches
// interrupted by a lost connection or an expired session are read again
// and re-armed, with backoff.
func (s *Source) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); s.heartbeat(ctx) }()
	for {
		select {
		case <-ctx.Done():
			// The client's calls wait out a lost connection; closing
			// ends them, and the watches with them.
			s.conn.Close()
			return nil
		case name := <-s.wantCh:
			wg.Add(1)
			go func() { defer wg.Done(); s.watch(ctx, name) }()
		}
	}
}

// heartbeat asks ZooKeeper for the stat of the root every
// heartbeatInterval until ctx is done, and records each answer (heard).
// A request on a silent link waits for go-zookeeper's read deadline: no
// answer, and none asked meanwhile.
func (s *Source) heartbeat(ctx context.Context) {
	tick := time.NewTicker(heartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !s.Connected() {
			continue
		}
		if _, _, err := s.conn.Exists(s.root); err == nil {
			s.heard.Store(time.Now().UnixNano())
		}
	}
}

// want asks Run to watch election name, if it is not watched and the
// bound allows.
func (s *Source) want(name string) {
	s.mu.RLock()
	watched := s.watched[name]
	s.mu.RUnlock()
	if watched {
		return
	}
	s.mu.Lock()
	ok := !s.watched[name] && len(s.watched) < s.max
	if ok {
		s.watched[name] = true
	}
	s.mu.Unlock()
	if !ok {
		return
	}
	select {
	case s.wantCh <- name:
	default:
		// Run is behind; the next Verify asks again.
		s.mu.Lock()
		delete(s.watched, name)
		s.mu.Unlock()
	}
}

// watch reads election name with a child watch, publishes it, and reads
// again on each change, until ctx is done.
func (s *Source) watch(ctx context.Context, name string) {
	path := s.path(name)
	var (
		backoff time.Duration
		synced  uint64 // the connection this watch synced in
	)
	for {
		again := s.rereadCh()
		st, ch, n, err := s.syncRead(path, true, synced)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.readFailed(name)
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			s.log.Debug("zookeeper election watch interrupted", "election", name, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff, synced = 0, n
		s.publish(name, st)
		s.readIn(name, n, true)
		select {
		case <-ctx.Done():
			return
		case <-ch:
			// Any event, a lost watch included: read again.
		case <-again:
			// A connection established: what changed while there was
			// none may have fired no event yet.
		}
	}
}

// state is one read of an election.
type state struct {
	seq    uint64 // the read's number (Source.reads)
	conn   uint64 // the connection it was read in (Source.sessions)
	exists bool
	pzxid  int64 // of the election node: the last change of its children
	leader string
	czxid  int64
	data   string
}

// syncRead reads the election at path over one connection, after a Sync
// in it unless the caller synced in it already (synced; connections count
// from 1), and returns the connection's count. Requests sent in order over
// one session see states in order, but go-zookeeper forgets the last zxid
// seen when a session expires, so a new session's server may be behind
// the reads of the last: the Sync orders the read after them.
func (s *Source) syncRead(path string, watch bool, synced uint64) (state, <-chan zk.Event, uint64, error) {
	for {
		n := s.sessions.Load()
		if n != synced {
			if _, err := s.conn.Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return state{}, nil, 0, err
			}
		}
		st, ch, err := s.read(path, watch)
		if err != nil {
			return state{}, nil, 0, err
		}
		s.heard.Store(time.Now().UnixNano())
		if s.sessions.Load() == n {
			st.conn = n
			return st, ch, n, nil
		}
		// Sent, or synced, over a later connection: its Sync does
		// not cover the read. Read again, synced.
	}
}

// read reads the election at path: its candidates and its leader's node.
// With watch, it leaves a watch on the election (its children, or its
// creation when it does not exist) and returns its channel. The read is
// numbered as its first request is sent, so that of two reads of one
// election over one session, the later numbered sees the later state.
func (s *Source) read(path string, watch bool) (state, <-chan zk.Event, error) {
	mu := &s.readMu[maphash.String(s.seed, path)%uint64(len(s.readMu))]
	for {
		var (
			children []string
			stat     *zk.Stat
			ch       <-chan zk.Event
			err      error
		)
		// The client queues a request inside the blocking call: hold
		// the number and the request together until it answers. Reads of
		// one election wait for each other's first round trip (Verify's
		// are few: proxy's --verify-rate bounds them per fence); of two
		// elections, only when they share one of 1024 locks.
		mu.Lock()
		seq := s.reads.Add(1)
		if watch {
			children, stat, ch, err = s.conn.ChildrenW(path)
		} else {
			children, stat, err = s.conn.Children(path)
		}
		mu.Unlock()
		if errors.Is(err, zk.ErrNoNode) {
			if !watch {
				return state{seq: seq}, nil, nil
			}
			ok, _, ech, err := s.conn.ExistsW(path)
			if err != nil {
				return state{}, nil, err
			}
			if ok {
				continue // created since: watch its children
			}
			return state{seq: seq}, ech, nil
		}
		if err != nil {
			return state{}, nil, err
		}
		st := state{seq: seq, exists: true, pzxid: stat.Pzxid}
		leader, ok := Leader(children)
		if !ok {
			return st, ch, nil
		}
		data, lstat, err := s.conn.Get(path + "/" + leader)
		if errors.Is(err, zk.ErrNoAuth) {
			// The leader's node's ACL denies fencegate READ (its
			// creator chose it): its data, the leader's label, cannot
			// be had, but its stat can (ZooKeeper checks no ACL for
			// exists), and the stat holds the term.
			var ok bool
			ok, lstat, err = s.conn.Exists(path + "/" + leader)
			if err == nil && !ok {
				err = zk.ErrNoNode
			}
			data = nil
			s.log.Debug("zookeeper leader node not readable: its term is known, its label is not", "node", path+"/"+leader)
		}
		if errors.Is(err, zk.ErrNoNode) {
			// The leader went away between the two reads; a watch
			// already fired, or will: read again.
			if ch != nil {
				<-ch
			}
			continue
		}
		if err != nil {
			return state{}, nil, err
		}
		st.leader, st.czxid, st.data = path+"/"+leader, lstat.Czxid, string(data)
		return st, ch, nil
	}
}

// Leader returns the candidate with the lowest sequence number among an
// election's children, and false when none is a candidate.
func Leader(children []string) (string, bool) {
	var (
		best    string
		bestSeq int64 = -1
	)
	for _, c := range children {
		seq, ok := sequence(c)
		if !ok {
			continue
		}
		if bestSeq < 0 || seq < bestSeq || (seq == bestSeq && c < best) {
			best, bestSeq = c, seq
		}
	}
	return best, bestSeq >= 0
}

// sequence is the sequence number ZooKeeper appended to a node's name.
func sequence(name string) (int64, bool) {
	if len(name) < seqDigits {
		return 0, false
	}
	digits := name[len(name)-seqDigits:]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

// readIn records that a read of election name, begun while the count of
// connections was n, is published (Fresh). A read by the election's watch
// (watch) also ends a run of failed ones (readFailed); a Verify's does
// not, as no watch is armed on what it read.
func (s *Source) readIn(name string, n uint64, watch bool) {
	s.mu.Lock()
	if s.watched[name] {
		s.readAt[name] = max(s.readAt[name], n)
		if watch {
			delete(s.failing, name)
		}
	}
	s.mu.Unlock()
}

// readFailed records that the watch of election name could not read it:
// it is not fresh until the watch reads it again.
func (s *Source) readFailed(name string) {
	s.mu.Lock()
	if s.watched[name] {
		s.failing[name] = true
	}
	s.mu.Unlock()
}

// change is a change of an election's term, for OnChange.
type change struct{ prev, next election.Term }

// publish folds a read of election name into memory unless a later read is
// published already, so that it can neither bring back a leader that has
// gone nor end the term of one that came since (a current leader refused
// TERM_ENDED until the election changes again). Later is the read's
// number: a read that found no election node has no pzxid to tell its
// age.
//
// A read numbered after the last one published that shows the election
// node's pzxid (its children's last change) below memory's went back for
// certain: over one session ZooKeeper answers in order, and each new
// connection is synced before it is read. ZooKeeper's history was
// rewound (rewound); the read is taken, and its leader is no leader if
// its term is at or below the floor.
func (s *Source) publish(name string, st state) election.Term {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.mu.Lock()
	old, known := s.terms[name]
	if !known {
		old = election.Term{Election: name}
	}
	var changes []change
	behind := st.exists && st.pzxid < old.ObservedRev
	switch {
	case st.seq < s.pubSeq[name], behind && st.seq == s.pubSeq[name]:
		// An older read (equal numbers: reads made by hand, in tests).
		s.mu.Unlock()
		return old
	case behind:
		changes = s.rewound(changes, name, old, st)
		if t, ok := s.terms[name]; ok {
			old = t
		}
	}
	s.seen(st)
	t := old
	if st.czxid != 0 && st.czxid > s.floor {
		t.Rev, t.Leader, t.Key, t.ObservedRev = st.czxid, st.data, st.leader, st.pzxid
	} else {
		// No leader, or one holding a term handed out twice (floor):
		// no one's as far as fencegate knows. Last still learns it, so
		// it reads as ended.
		t.Rev, t.Leader, t.Key = 0, "", ""
		t.ObservedRev = max(t.ObservedRev, st.pzxid)
	}
	if t.Rev != old.Rev {
		t.Changes++
	}
	t.Last = max(t.Last, st.czxid)
	if t.Rev != old.Rev || t.Leader != old.Leader || t.Key != old.Key {
		changes = append(changes, change{old, t})
	}
	if s.watched[name] {
		if s.pubSeq == nil {
			s.pubSeq = make(map[string]uint64)
		}
		// Kept even when memory keeps no term: an older read of a
		// leader must not come after it.
		s.pubSeq[name] = st.seq
		if known || t.Rev != 0 || t.Last != 0 {
			s.terms[name] = t
		}
	} else if known {
		// Past MaxElections nothing follows it: memory would go
		// stale. Verify reads it each time instead.
		delete(s.terms, name)
		delete(s.pubSeq, name)
	}
	s.mu.Unlock()
	if s.onChange != nil {
		for _, c := range changes {
			s.onChange(c.prev, c.next)
		}
	}
	return t
}

// seen records the zxids of a read about to be published, by the
// connection it was read in. s.mu must be held.
func (s *Source) seen(st state) {
	z := max(st.pzxid, st.czxid)
	switch {
	case st.conn > s.highConn:
		s.highBefore = max(s.highBefore, s.high)
		s.high, s.highConn = z, st.conn
	case st.conn == s.highConn:
		s.high = max(s.high, z)
	default:
		s.highBefore = max(s.highBefore, z)
	}
}

// rewound records that ZooKeeper's history went back, as a read of
// election name, st, showed against memory's old: ZooKeeper restored
// from a backup, rebuilt, or replaced behind the same address. Its zxids
// (terms) up to the highest fencegate read before (of any election: zxids
// are ZooKeeper's, not an election's) may be handed out again, so from
// then on a term up to it is no leader's, whoever holds it (its holder's
// writes are TERM_ENDED), as the etcd watcher treats a restored etcd;
// leaders campaign past it. Memory's terms are of the history before:
// any later read may be published. s.mu must be held.
func (s *Source) rewound(changes []change, name string, old election.Term, st state) []change {
	before := s.highBefore
	if st.conn > s.highConn {
		before = max(before, s.high) // every read published is of a connection before
	}
	floor := max(before, old.ObservedRev, old.Last)
	for n, t := range s.terms {
		t.ObservedRev = 0
		s.terms[n] = t
	}
	if floor <= s.floor {
		return changes
	}
	s.floor = floor
	s.log.Warn("zookeeper history went back (restored from a backup, rebuilt, or another ensemble behind the same address?): "+
		"terms up to the highest zxid read before are refused TERM_ENDED, as leaders from before and after may hold the same one; leaders holding one must campaign again",
		"election", name, "pzxid", st.pzxid, "was", old.ObservedRev, "refused_up_to", floor)
	for n, t := range s.terms {
		if t.Rev != 0 && t.Rev <= floor {
			prev := t
			t.Rev, t.Leader, t.Key = 0, "", ""
			t.Changes++
			s.terms[n] = t
			changes = append(changes, change{prev, t})
		}
	}
	return changes
}

// Verify syncs with the ZooKeeper leader, reads election name and reports
// whether token is its current leader's term (a term that has ended is
// known from memory; one that ended unseen cannot be told from a forgery,
// and is not held). The read is folded into memory, and the election is
// watched from then on. For an invalid name, Verify reports no leader and
// held false. It returns an error when ZooKeeper cannot answer before ctx
// is done.
func (s *Source) Verify(ctx context.Context, name string, token int64) (election.Term, bool, error) {
	if election.ValidateName(name) != nil || name == "." || name == ".." {
		return election.Term{Election: name}, false, nil
	}
	s.want(name)
	type result struct {
		st  state
		n   uint64
		err error
	}
	// The client's calls take no context: they wait out a reconnection.
	done := make(chan result, 1)
	path := s.path(name)
	go func() {
		st, _, n, err := s.syncRead(path, false, 0)
		done <- result{st, n, err}
	}()
	var r result
	select {
	case <-ctx.Done():
		return election.Term{}, false, fmt.Errorf("zookeeper: verify %q: %w", name, ctx.Err())
	case r = <-done:
	}
	if r.err != nil {
		return election.Term{}, false, fmt.Errorf("zookeeper: verify %q: %w", name, r.err)
	}
	// The newest state known answers: this read, or a later one the
	// watch published meanwhile.
	t := s.publish(name, r.st)
	s.readIn(name, r.n, false)
	return t, t.HasLeader() && token == t.Rev, nil
}

func (s *Source) path(name string) string { return s.root + "/" + name }
