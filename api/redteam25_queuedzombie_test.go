package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/proxy/postgres"
)

// TestRedTeam25QueuedWriteOutlivesItsTerm
//
// Attack: the zombie is a leader whose write is admitted while its term is
// current, at a moment when every PostgreSQL connection slot of the replica
// is busy (a stall, a lock, a burst of other fences' writes: here another
// fence's writes wait on a table lock an admin holds). The write waits in
// the replica's coalescer queue. Meanwhile its term ends (the leader
// resigns; a lease expiry is the same) and fencegate learns it: the watch
// shows no leader, and the same token sent now is refused TERM_ENDED from
// memory. Then the slots free up.
//
// What happened (on this code): the queued write leaves the queue with
// nothing looking at its term again, and is applied with the ended term's
// token (HTTP 200, its row in the table), after fencegate knew the term
// was over: the backend's check (rule 2) passes because no later leader
// has written yet, and rule 1 was only looked at on admission. Nothing but
// the caller's own context bounds the wait (the HTTP client here has no
// timeout; gRPC without a deadline the same), so the write may land long
// after the term ended. The PostgreSQL listener's transactions are decided
// again when their term ends (Admission.Ended); the gRPC/HTTP pipeline's
// queued writes are not (nor, by the same path, when a policy reload adds a
// deny rule for their caller or its bearer token is removed while they
// wait).
//
// What should happen: a write that is still queued in fencegate (not yet
// sent to the backend) when its term ends, as fencegate knows it, is
// refused TERM_ENDED (or STALE_TOKEN) when it leaves the queue: the term is
// looked at again just before the batch is sent, as DESIGN.md's rule 1
// promises ("refused as soon as fencegate learns of it").
//
// Severity: medium (a zombie write applied after fencegate knew its term
// ended; the window is the queue wait, which a stalled or saturated backend
// stretches to the caller's own deadline).
func TestRedTeam25QueuedWriteOutlivesItsTerm(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	ledger := ledgerTable(t, c)
	blocker := ledger + "_blk"
	if _, err := c.Exec(t.Context(), fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s(id bigserial primary key, worker text not null, token bigint not null, n int)`, blocker)); err != nil {
		t.Fatal(err)
	}
	cli := newEtcdClient(t)
	fence, other := fenceName(t), fenceName(t)+"-other"
	zombie := campaign(t, cli, fence, "zombie")
	busy := campaign(t, cli, other, "busy")
	waitTerm(t, r, fence, zombie.token)
	waitTerm(t, r, other, busy.token)

	// An admin holds a lock the other fence's writes wait on, long
	// enough to take every connection slot of the replica.
	admin := db(t)
	tx, err := admin.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := tx.Exec(t.Context(), "LOCK TABLE "+blocker+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	slots := int(postgres.DefaultConfig().MaxConns)
	var wg sync.WaitGroup
	for i := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = execHTTPNoFatal(r, other, busy.token, insert(blocker, fmt.Sprint("busy-", i), busy.token))
		}()
	}
	defer wg.Wait()
	waitFor(t, "every connection slot waiting on the lock", func() bool {
		var n int
		_ = c.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&n)
		return n >= slots
	})

	// The zombie's write: admitted, term current, queued.
	answer := make(chan int, 1)
	go func() { answer <- execHTTPNoFatal(r, fence, zombie.token, insert(ledger, "zombie", zombie.token)) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case code := <-answer:
		t.Fatalf("control: the zombie's write was answered %d before the slots freed; it did not queue", code)
	default:
	}

	// Its term ends, and fencegate knows it.
	zombie.resign(t)
	waitFor(t, "the replica to see the term end", func() bool { return !r.watcher.Term(fence).HasLeader() })
	if got := execHTTP(t, r, fence, zombie.token, insert(ledger, "zombie-after", zombie.token)); got.reason != "TERM_ENDED" {
		t.Fatalf("control: the ended term's token sent now: HTTP %d %s, want TERM_ENDED", got.code, got.reason)
	}

	// The slots free up.
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-answer:
	case <-time.After(20 * time.Second):
		t.Fatal("the queued write was never answered")
	}
	var n int
	if err := c.QueryRow(t.Context(), "SELECT count(*) FROM "+ledger+" WHERE worker = 'zombie'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || code == http.StatusOK {
		// (Sent to PostgreSQL, the write would not have waited: neither
		// its table nor its fence row was locked. It waited in fencegate.)
		t.Errorf("HOLE: a write queued in fencegate while its term was current was applied after the term ended and the replica knew it (HTTP %d, %d row(s) written with ended term %d), want TERM_ENDED and nothing written", code, n, zombie.token)
	}
}

// execHTTPNoFatal posts statements and returns the HTTP status (0 on a
// transport error), for goroutines other than the test's.
func execHTTPNoFatal(r *replica, fence string, token int64, stmts ...string) int {
	req, err := http.NewRequest(http.MethodPost, r.url+"/v1/fences/"+fence+"/sql", strings.NewReader(sqlBody(stmts...)))
	if err != nil {
		return 0
	}
	req.Header.Set("Fencing-Token", fmt.Sprint(token))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
