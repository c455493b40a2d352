package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// openBackend opens a Backend of its own on the shared server.
func openBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := Open(t.Context(), runtimeDSN, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// occupy holds all of b's connection slots for d, so the writes sent
// meanwhile queue and go out together.
func occupy(t *testing.T, b *Backend, slots int, d time.Duration) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for range slots {
		wg.Go(func() {
			sleep := fmt.Sprintf("SELECT pg_sleep(%g)", d.Seconds())
			if _, err := b.Exec(t.Context(), unique("busy"), 1, []Statement{{SQL: sleep}}); err != nil {
				t.Errorf("occupying write: %v", err)
			}
		})
	}
	// Until every slot is taken.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if b.co.Free() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slots never all taken")
		}
		time.Sleep(time.Millisecond)
	}
	return &wg
}

// TestBatchWritesAreSeparateTransactions: writes that share a round trip
// commit or fail each on its own. A failing statement, a stale token and a
// parameter that cannot be encoded cost only their own write.
func TestBatchWritesAreSeparateTransactions(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	db := admin(t)
	table, stale := unique("batch"), unique("fence")
	mustExec(t, db, "CREATE TABLE "+table+"(n int PRIMARY KEY)")
	if _, err := b.Exec(t.Context(), stale, 10, []Statement{{SQL: "SELECT 1"}}); err != nil {
		t.Fatal(err)
	}

	insert := func(n any) Statement {
		return Statement{SQL: "INSERT INTO " + table + "(n) VALUES ($1)", Params: []any{n}}
	}
	type write struct {
		fence string
		token tokens.Token
		stmts []Statement
		want  tokens.Reason // "" for accepted
	}
	writes := []write{
		{unique("fence"), 1, []Statement{insert(1.0)}, ""},
		{unique("fence"), 1, []Statement{insert(2.0), {SQL: "SELECT 1/0"}}, tokens.ReasonStatementFailed},
		{unique("fence"), 1, []Statement{insert(3.0)}, ""},
		{stale, 9, []Statement{insert(4.0)}, tokens.ReasonStaleToken},
		{unique("fence"), 1, []Statement{insert(5.0), insert(map[string]any{"a": 1.0})}, tokens.ReasonInvalidRequest},
		{unique("fence"), 1, []Statement{insert(6.0), {SQL: "SELEC nonsense"}}, tokens.ReasonInvalidRequest},
		{unique("fence"), 1, []Statement{insert(7.0), insert(7.0)}, tokens.ReasonStatementFailed},
		{unique("fence"), 1, []Statement{insert(8.0)}, ""},
	}
	busy := occupy(t, b, 1, 300*time.Millisecond)
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() {
			_, errs[i] = b.Exec(t.Context(), w.fence, w.token, w.stmts)
		})
	}
	wg.Wait()
	busy.Wait()
	if s := b.Stats(); s.Largest < 2 || s.Calls <= s.Batches {
		t.Fatalf("stats: got %+v, want the queued writes sent together", s)
	}
	for i, w := range writes {
		if w.want == "" {
			if errs[i] != nil {
				t.Errorf("write %d: got %v, want accepted", i, errs[i])
			}
			continue
		}
		r, ok := tokens.AsRefusal(errs[i])
		if !ok || r.Reason != w.want {
			t.Errorf("write %d: got %v, want %s", i, errs[i], w.want)
		}
	}
	rows, err := db.Query(t.Context(), "SELECT n FROM "+table+" ORDER BY n")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if want := []int{1, 3, 8}; !slices.Equal(got, want) {
		t.Errorf("rows: got %v, want %v (the accepted writes only)", got, want)
	}
}

// TestBatchCallerGivesUp: a caller whose context ends while its write is in
// a batch gets an unknown outcome; the batch goes on for the others.
func TestBatchCallerGivesUp(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 1})
	db := admin(t)
	table := unique("gaveup")
	mustExec(t, db, "CREATE TABLE "+table+"(n int PRIMARY KEY)")
	insert := func(n float64) Statement {
		return Statement{SQL: "INSERT INTO " + table + "(n) VALUES ($1)", Params: []any{n}}
	}

	busy := occupy(t, b, 1, 200*time.Millisecond)
	// Queued behind the busy slot, then sent together; the impatient write
	// sleeps past its deadline.
	// Margins wide enough for a loaded machine: the busy slot frees long
	// before the deadline, the sleep ends long after it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var impatient, patient error
	var wg sync.WaitGroup
	wg.Go(func() {
		_, impatient = b.Exec(ctx, unique("fence"), 1, []Statement{{SQL: "SELECT pg_sleep(1.5)"}, insert(1)})
	})
	time.Sleep(20 * time.Millisecond)
	wg.Go(func() {
		_, patient = b.Exec(t.Context(), unique("fence"), 1, []Statement{insert(2)})
	})
	wg.Wait()
	busy.Wait()

	r := refusal(t, impatient, tokens.ReasonBackendUnavailable)
	if r.Metadata["outcome"] != "unknown" {
		t.Errorf("impatient write: got %v, want outcome unknown", impatient)
	}
	if patient != nil {
		t.Errorf("patient write in the same batch: got %v, want accepted", patient)
	}
	if n := count(t, db, table); n != 2 {
		t.Errorf("rows: got %d, want 2 (the given-up write committed all the same)", n)
	}
}

// TestBatchedWritersNeverRegress is TestConcurrentWritersNeverRegress with
// few connections, so most writes share their round trip with others.
func TestBatchedWritersNeverRegress(t *testing.T) {
	t.Parallel()
	b := openBackend(t, Config{MaxConns: 2})
	for range 5 {
		ledgerRound(t, b)
	}
	if s := b.Stats(); s.Largest < 2 {
		t.Errorf("stats: got %+v, want batches", s)
	}
}
