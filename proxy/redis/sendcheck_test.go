package redis

import (
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/tokens"
)

// TestSendCheckRefusesQueuedWrites: writes that waited in the queue are
// sent only if the send check lets them; one it refuses gets its refusal,
// nothing written, and the rest of its batch goes out. Not parallel: it
// pauses the server.
func TestSendCheckRefusesQueuedWrites(t *testing.T) {
	b := openBackend(t, onePoolSlot())
	db := admin(t)
	ended := unique("ended")
	var mu sync.Mutex
	checked := map[string]int{}
	b.SetSendCheck(func(fence string, tok tokens.Token) *tokens.RefusalError {
		mu.Lock()
		defer mu.Unlock()
		checked[fence]++
		if fence == ended {
			return tokens.Refuse(tokens.ReasonTermEnded, fence, tok, "the term ended while the write waited")
		}
		return nil
	})
	first, live := unique("first"), unique("live")

	if err := db.Do(t.Context(), "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, f := range []string{first, ended, live} {
		wg.Go(func() {
			_, errs[i] = b.Exec(t.Context(), f, 1, [][]string{{"SET", key(f, "v"), "1"}})
		})
		if i == 0 {
			for b.co.Free() != 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for b.co.Queued() != 2 {
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the writes the check lets through: got %v and %v, want both accepted", errs[0], errs[2])
	}
	if r, ok := tokens.AsRefusal(errs[1]); !ok || r.Reason != tokens.ReasonTermEnded || r.Fence != ended {
		t.Fatalf("the write whose term ended while it waited: got %v, want TERM_ENDED of %s", errs[1], ended)
	}
	if n := db.Exists(t.Context(), key(ended, "v"), TokenKey(ended)).Val(); n != 0 {
		t.Errorf("the refused write left %d of its key and its fence's mark, want none", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range []string{first, ended, live} {
		if checked[f] != 1 {
			t.Errorf("fence %s: checked %d times, want once", f, checked[f])
		}
	}
}
