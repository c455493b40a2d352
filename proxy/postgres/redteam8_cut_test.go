package postgres

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// rt8Segments names each Sync segment fencegate sends by the marker its
// Binds carry, so a test can act on the answer to one write's Sync.
type rt8Segments struct {
	mu      sync.Mutex
	markers []string
	cur     map[int]string   // link → marker of the segment being sent
	pending map[int][]string // link → markers of the Syncs sent, not answered
}

func newRT8Segments(markers ...string) *rt8Segments {
	return &rt8Segments{markers: markers, cur: map[int]string{}, pending: map[int][]string{}}
}

// front records m; install it as (part of) the proxy's front hook.
func (s *rt8Segments) front(l *rt8Link, m rt8Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m.typ {
	case 'B':
		for _, mk := range s.markers {
			if bytes.Contains(m.raw, []byte(mk)) {
				s.cur[l.id] = mk
			}
		}
	case 'S', 'Q':
		s.pending[l.id] = append(s.pending[l.id], s.cur[l.id])
		s.cur[l.id] = ""
	}
}

// answered returns, for a ReadyForQuery from the server on l, the marker
// of the segment it answers ("" for none).
func (s *rt8Segments) answered(l *rt8Link) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.pending[l.id]
	if len(q) == 0 {
		return ""
	}
	s.pending[l.id] = q[1:]
	return q[0]
}

type rt8Write struct {
	name string
	err  error
}

// rt8Check checks every answer against the database, and that no write
// was applied more than once.
func rt8Check(t *testing.T, got map[string]int, writes []rt8Write) {
	t.Helper()
	for _, w := range writes {
		n := got["rt8-"+w.name]
		if n > 1 {
			t.Errorf("%s: applied %d times (fencegate sent it again)", w.name, n)
		}
		rtoHonest(t, w.name, w.err, n > 0)
	}
}

func rt8Unknown(t *testing.T, name string, err error) {
	t.Helper()
	r, ok := tokens.AsRefusal(err)
	if !ok || r.Reason != tokens.ReasonBackendUnavailable || r.Metadata["outcome"] != "unknown" {
		t.Errorf("%s: got %v, want BACKEND_UNAVAILABLE with outcome unknown", name, err)
	}
}

// TestRedTeam8CutBeforeReadyForQuery: the connection is cut after a
// write's Sync reached the server and the server answered it (committed),
// before the ReadyForQuery reaches fencegate. Alone, on a connection that
// had to prepare the write's statements first, and in a batch of three
// (cut at the answer of the second: the first is known, the second and
// third are not). Every answer must be true of the database, and none of
// the writes applied twice.
func TestRedTeam8CutBeforeReadyForQuery(t *testing.T) {
	cases := []struct {
		name   string
		warm   bool
		batch  bool
		cutAt  string
		writes []string
	}{
		{"lone", true, false, "rt8-A", []string{"A"}},
		{"first-use", false, false, "rt8-A", []string{"A"}},
		{"batch", true, true, "rt8-B", []string{"A", "B", "C"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newRT8Proxy(t, rt8Target())
			b := rt8Open(t, p, Config{MaxConns: 1, StatementTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second})
			db := admin(t)
			out := unique("rt8_out")
			mustExec(t, db, "CREATE TABLE "+out+"(m text)")
			ins := func(m string) []Statement {
				return []Statement{{SQL: "INSERT INTO " + out + "(m) VALUES ($1)", Params: []any{"rt8-" + m}}}
			}
			fence := unique("rt8_f")
			if tc.warm {
				if _, err := b.Exec(t.Context(), fence, 5, ins("warm")); err != nil {
					t.Fatal(err)
				}
			}
			segs := newRT8Segments("rt8-A", "rt8-B", "rt8-C")
			p.setFront(func(l *rt8Link, m rt8Msg) rt8Action { segs.front(l, m); return rt8Forward })
			var once sync.Once
			p.setBack(func(l *rt8Link, m rt8Msg, _ bool, _ int) rt8Action {
				if m.typ != 'Z' {
					return rt8Forward
				}
				cut := false
				if segs.answered(l) == tc.cutAt {
					once.Do(func() { cut = true })
				}
				if cut {
					return rt8Cut
				}
				return rt8Forward
			})

			errs := make([]error, len(tc.writes))
			if tc.batch {
				busy := occupy(t, b, 1, 200*time.Millisecond)
				var wg sync.WaitGroup
				for i, w := range tc.writes {
					wg.Go(func() { _, errs[i] = b.Exec(t.Context(), fence, 5, ins(w)) })
					rtoQueued(t, b, i+1)
				}
				busy.Wait()
				wg.Wait()
			} else {
				_, errs[0] = b.Exec(t.Context(), fence, 5, ins(tc.writes[0]))
			}
			p.setBack(nil)
			// The next write goes on a new connection: its statements
			// are prepared there under names the cut one used.
			_, errN := b.Exec(t.Context(), fence, 5, ins("N"))

			got := rt8Rows(t, db, out)
			writes := []rt8Write{{"N", errN}}
			for i, w := range tc.writes {
				writes = append(writes, rt8Write{w, errs[i]})
			}
			rt8Check(t, got, writes)
			if errN != nil {
				t.Errorf("N, on a new connection: %v", errN)
			}
			for i, w := range tc.writes {
				if "rt8-"+w == tc.cutAt || (tc.batch && i > 0) {
					rt8Unknown(t, w, errs[i])
				} else if errs[i] != nil {
					t.Errorf("%s, answered before the cut: %v", w, errs[i])
				}
			}
		})
	}
}

// TestRedTeam8StallBeforeReadyForQuery: the server committed a write and
// answered, and its answer is held up on the way (the ReadyForQuery
// stalls) past the write's time limit, alone and as the first of a batch
// of three; or the caller gives up while it is held. The watchdog's
// cancel finds nothing to cancel; fencegate gives the connection up.
// Every write committed, and none may be answered as refused.
func TestRedTeam8StallBeforeReadyForQuery(t *testing.T) {
	cases := []struct {
		name   string
		batch  bool
		cancel bool
	}{
		{"lone-time-limit", false, false},
		{"batch-time-limit", true, false},
		{"lone-caller-cancels", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newRT8Proxy(t, rt8Target())
			wt := 300 * time.Millisecond
			if tc.cancel {
				wt = 10 * time.Second
			}
			b := rt8Open(t, p, Config{MaxConns: 1, StatementTimeout: 5 * time.Second, WriteTimeout: wt})
			db := admin(t)
			out := unique("rt8_out")
			mustExec(t, db, "CREATE TABLE "+out+"(m text)")
			ins := func(m string) []Statement {
				return []Statement{{SQL: "INSERT INTO " + out + "(m) VALUES ($1)", Params: []any{"rt8-" + m}}}
			}
			fence := unique("rt8_f")
			if _, err := b.Exec(t.Context(), fence, 5, ins("warm")); err != nil {
				t.Fatal(err)
			}
			segs := newRT8Segments("rt8-A", "rt8-B", "rt8-C")
			p.setFront(func(l *rt8Link, m rt8Msg) rt8Action { segs.front(l, m); return rt8Forward })
			release := make(chan struct{})
			var releaseOnce sync.Once
			unblock := func() { releaseOnce.Do(func() { close(release) }) }
			defer unblock()
			p.setBack(func(l *rt8Link, m rt8Msg, _ bool, _ int) rt8Action {
				if m.typ == 'Z' && segs.answered(l) == "rt8-A" {
					<-release
				}
				return rt8Forward
			})

			names := []string{"A"}
			if tc.batch {
				names = []string{"A", "B", "C"}
			}
			errs := make([]error, len(names))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.batch {
				busy := occupy(t, b, 1, 100*time.Millisecond)
				var wg sync.WaitGroup
				for i, w := range names {
					wg.Go(func() { _, errs[i] = b.Exec(ctx, fence, 5, ins(w)) })
					rtoQueued(t, b, i+1)
				}
				busy.Wait()
				wg.Wait()
			} else {
				if tc.cancel {
					time.AfterFunc(500*time.Millisecond, cancel)
				}
				_, errs[0] = b.Exec(ctx, fence, 5, ins("A"))
			}
			unblock()
			p.setBack(nil)
			_, errN := b.Exec(t.Context(), fence, 5, ins("N"))

			got := rt8Rows(t, db, out)
			writes := []rt8Write{{"N", errN}}
			for i, w := range names {
				writes = append(writes, rt8Write{w, errs[i]})
				rt8Unknown(t, w, errs[i])
			}
			rt8Check(t, got, writes)
		})
	}
}

// TestRedTeam8CommitFailureInBatch: writes that fail at COMMIT (a
// deferred unique constraint) share a pipeline with writes that commit,
// first, in the middle and last of the batch. A failure at commit is
// known (rolled back) and costs only its own write.
func TestRedTeam8CommitFailureInBatch(t *testing.T) {
	b := openBackend(t, Config{MaxConns: 1, StatementTimeout: 5 * time.Second})
	db := admin(t)
	out, dt := unique("rt8_out"), unique("rt8_dt")
	mustExec(t, db, "CREATE TABLE "+out+"(m text)")
	mustExec(t, db, "CREATE TABLE "+dt+"(k int, CONSTRAINT "+dt+"_u UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)")
	mustExec(t, db, "INSERT INTO "+dt+" VALUES (1)")
	fence := unique("rt8_f")
	ok := func(m string) []Statement {
		return []Statement{{SQL: "INSERT INTO " + out + "(m) VALUES ($1)", Params: []any{"rt8-" + m}}}
	}
	// Both statements succeed; the duplicate key is found at COMMIT.
	bad := func(m string) []Statement {
		return append(ok(m), Statement{SQL: "INSERT INTO " + dt + " VALUES (1)"})
	}
	names := []string{"A", "B", "C", "D", "E"}
	stmts := [][]Statement{bad("A"), ok("B"), bad("C"), ok("D"), bad("E")}
	errs := make([]error, len(names))
	busy := occupy(t, b, 1, 200*time.Millisecond)
	var wg sync.WaitGroup
	for i := range names {
		wg.Go(func() { _, errs[i] = b.Exec(t.Context(), fence, 1, stmts[i]) })
		rtoQueued(t, b, i+1)
	}
	busy.Wait()
	wg.Wait()
	if s := b.Stats(); s.Largest < len(names) {
		t.Fatalf("stats %+v: want the %d writes in one batch", s, len(names))
	}
	got := rt8Rows(t, db, out)
	var writes []rt8Write
	for i, n := range names {
		writes = append(writes, rt8Write{n, errs[i]})
		r, _ := tokens.AsRefusal(errs[i])
		switch {
		case i%2 == 1 && errs[i] != nil:
			t.Errorf("%s: got %v, want accepted", n, errs[i])
		case i%2 == 0 && (r == nil || r.Reason != tokens.ReasonStatementFailed || r.Metadata["sqlstate"] != "23505" || r.Metadata["outcome"] != ""):
			t.Errorf("%s: got %v, want STATEMENT_FAILED 23505 at commit, outcome known", n, errs[i])
		}
	}
	rt8Check(t, got, writes)
}
