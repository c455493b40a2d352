package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam26SiftedBatchNeverAbandoned
//
// Attack: a batch of queued writes in which the send check (e2ab81a,
// coalesce.Sift) refuses one: its term ended while it waited, the
// ordinary case the check was made for. The other write of the batch is
// sent and waits on a lock (a row a long transaction holds, a fence row
// an open pgwire transaction of the old term holds), and its caller gives
// up at its deadline.
//
// What happened (on this code): coalesce.BatchContext is taken before
// Sift, and the batch's count of callers still waiting (batch.left)
// includes the refused write. Its caller was finished by Sift and
// returned (Finished), so it never counts itself out as an Orphaned
// caller does; when every caller still in the batch has given up, left
// stays at 1 and the batch's context is never cancelled. The write is not
// abandoned as a batch every caller left must be (BatchContext: "when all
// have left, the I/O is abandoned as it would be for one"): it holds the
// connection slot until the server ends the statement
// (statement_timeout) or the lock is released. While the slots are held
// this way, later writes queue, and those whose deadline comes first are
// refused BACKEND_UNAVAILABLE ("no connection"), though nobody waits for
// the stuck batch. Each zombie write refused at send time can turn one
// given-up batch into a stuck slot. The control subtest (the same batch
// with no write refused) frees the slot as soon as its callers give up.
// proxy/redis's runBatch has the same order (BatchContext, then Sift);
// there go-redis's read timeout bounds the wait.
//
// What should happen: the writes Sift refuses count as left the batch
// (or BatchContext is taken over the calls Sift kept), so the batch's I/O
// is abandoned once every remaining caller gave up, and the slot serves
// the next write.
//
// Severity: low to medium (availability: PostgreSQL connection slots held
// for up to statement_timeout, every write queued behind them refused,
// triggered by the very refusals the send check exists for).
func TestRedTeam26SiftedBatchNeverAbandoned(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		name := "control_no_refusal"
		if refuse {
			name = "one_write_refused_at_send"
		}
		t.Run(name, func(t *testing.T) { siftedBatch(t, refuse) })
	}
}

func siftedBatch(t *testing.T, refuse bool) {
	t.Helper()
	// A deployment that allows long statements: the slot is held as long
	// as statement_timeout lets the stuck write wait.
	app := unique("rt26sift")
	b := openBackend(t, Config{MaxConns: 1, StatementTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, ApplicationName: app})
	db := admin(t)
	table := unique("rt26sift")
	mustExec(t, db, "CREATE TABLE "+table+"(n int PRIMARY KEY)")
	mustExec(t, db, "INSERT INTO "+table+" VALUES (1)")
	ended := unique("ended")
	b.SetSendCheck(func(fence string, tok tokens.Token) *tokens.RefusalError {
		if refuse && fence == ended {
			return tokens.Refuse(tokens.ReasonTermEnded, fence, tok, "the term ended while the write waited")
		}
		return nil
	})

	// A long transaction holds the row the writes update.
	holder := admin(t)
	mustExec(t, holder, "BEGIN")
	mustExec(t, holder, "SELECT n FROM "+table+" WHERE n = 1 FOR UPDATE")
	t.Cleanup(func() { _, _ = holder.Exec(context.WithoutCancel(t.Context()), "ROLLBACK") })

	blocked := []Statement{{SQL: "UPDATE " + table + " SET n = 1 WHERE n = 1"}}

	// The only slot: a write that waits on the lock for 1 s, then gives up.
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, _ = b.Exec(ctx, unique("first"), 1, blocked)
	})
	for deadline := time.Now().Add(5 * time.Second); b.co.Free() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slot was never taken")
		}
	}
	// Queued behind it: the write whose term ends (refused at send when
	// refuse; else a write to the locked row as well), and a write to the
	// locked row. Both callers give up after 2.5 s, in the batch.
	errs := make([]error, 2)
	for i, f := range []string{ended, unique("live")} {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
			defer cancel()
			_, errs[i] = b.Exec(ctx, f, 1, blocked)
		})
	}
	for deadline := time.Now().Add(5 * time.Second); b.co.Queued() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writes never queued")
		}
	}
	wg.Wait()
	if refuse {
		if r, ok := tokens.AsRefusal(errs[0]); !ok || r.Reason != tokens.ReasonTermEnded {
			t.Fatalf("the write whose term ended: got %v, want TERM_ENDED", errs[0])
		}
	}
	if r, ok := tokens.AsRefusal(errs[1]); !ok || r.Reason != tokens.ReasonBackendUnavailable {
		t.Fatalf("the write that gave up in the batch: got %v, want BACKEND_UNAVAILABLE", errs[1])
	}

	// Every caller of the batch has left: its write must be abandoned and
	// its slot freed, as for a batch every caller left (the control), not
	// kept waiting on the lock until statement_timeout.
	deadline := time.Now().Add(5 * time.Second)
	for b.co.Free() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if b.co.Free() == 0 {
		t.Errorf("5 s after every caller of the batch gave up, the batch still holds the only connection slot " +
			"(its I/O was never abandoned; it waits on the lock until statement_timeout, 30 s here, and every write queued meanwhile is refused BACKEND_UNAVAILABLE)")
	}
}
