package postgres

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// rt8Open opens a Backend of its own through proxy p.
func rt8Open(t *testing.T, p *rt8Proxy, cfg Config) *Backend {
	t.Helper()
	b, err := Open(t.Context(), p.dsn(runtimeDSN), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func rt8Target() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(server.Port())) }

// rt8Rows returns how many times each marker is in table out.
func rt8Rows(t *testing.T, db *pgx.Conn, out string) map[string]int {
	t.Helper()
	rows, err := db.Query(t.Context(), "SELECT m FROM "+out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, m := range got {
		n[m]++
	}
	return n
}

// rt8StallAfterBindOf holds, once, the messages that follow the Bind
// carrying marker for d, as a network that stops delivering in the
// middle of a pipelined write and recovers does: the server has the
// write's fence check and the Bind of its statement, not the rest.
func rt8StallAfterBindOf(p *rt8Proxy, marker string, d time.Duration) *atomic.Bool {
	var seen, done atomic.Bool
	p.setFront(func(_ *rt8Link, m rt8Msg) rt8Action {
		switch {
		case m.typ == 'B' && bytes.Contains(m.raw, []byte(marker)):
			seen.Store(true)
		case seen.Load() && done.CompareAndSwap(false, true):
			time.Sleep(d)
		}
		return rt8Forward
	})
	return &done
}

// TestRedTeam8StallMidWrite: the network stalls in the middle of a
// write, after the Bind of its INSERT reached the server and before the
// rest of the write did, for longer than statement_timeout; then it
// recovers. The server's statement timeout fires: if the server answered
// it while waiting for the next message (an ErrorResponse and a
// ReadyForQuery of its own, then another pair for the rest of the write
// up to its Sync), fencegate would read one write's answers as the
// next's. Every answer fencegate gives, for that write, the write sent
// behind it in the same pipeline, and the writes that follow on the same
// pooled connection (one with a stale token), must be true of the
// database.
func TestRedTeam8StallMidWrite(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "lone", true: "batch"}[batch], func(t *testing.T) {
			p := newRT8Proxy(t, rt8Target())
			b := rt8Open(t, p, Config{MaxConns: 1, StatementTimeout: 600 * time.Millisecond, WriteTimeout: 10 * time.Second})
			db := admin(t)
			out := unique("rt8_out")
			mustExec(t, db, "CREATE TABLE "+out+"(m text)")
			ins := func(m string) []Statement {
				return []Statement{{SQL: "INSERT INTO " + out + "(m) VALUES ($1)", Params: []any{"rt8-" + m}}}
			}
			fence := unique("rt8_f")
			// Prepares the statements on the pooled connection and sets the mark.
			if _, err := b.Exec(t.Context(), fence, 5, ins("warm")); err != nil {
				t.Fatal(err)
			}

			stalled := rt8StallAfterBindOf(p, "rt8-A", 1500*time.Millisecond)
			var errA, errB error
			if batch {
				busy := occupy(t, b, 1, 150*time.Millisecond)
				var wg sync.WaitGroup
				wg.Go(func() { _, errA = b.Exec(t.Context(), fence, 5, ins("A")) })
				rtoQueued(t, b, 1)
				wg.Go(func() { _, errB = b.Exec(t.Context(), fence, 5, ins("B")) })
				rtoQueued(t, b, 2)
				busy.Wait()
				wg.Wait()
				if s := b.Stats(); s.Largest < 2 {
					t.Fatalf("A and B not sent together: %+v", s)
				}
			} else {
				_, errA = b.Exec(t.Context(), fence, 5, ins("A"))
			}
			if !stalled.Load() {
				t.Fatal("the write was never stalled")
			}
			p.setFront(nil)
			// The next writes on the one pooled connection: W is current,
			// S is stale (below the mark 5) and must be refused, V is
			// current.
			_, errW := b.Exec(t.Context(), fence, 5, ins("W"))
			_, errS := b.Exec(t.Context(), fence, 4, ins("S"))
			_, errV := b.Exec(t.Context(), fence, 6, ins("V"))

			got := rt8Rows(t, db, out)
			writes := []struct {
				name string
				err  error
			}{{"A", errA}, {"W", errW}, {"S", errS}, {"V", errV}}
			if batch {
				writes = append(writes, struct {
					name string
					err  error
				}{"B", errB})
			}
			for _, w := range writes {
				rtoHonest(t, w.name, w.err, got["rt8-"+w.name] > 0)
			}
			if got["rt8-S"] > 0 {
				t.Errorf("S, token 4 below the mark 5, was applied: %d rows", got["rt8-S"])
			}
		})
	}
}
