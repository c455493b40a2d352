package tokens_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

func TestTrackerZero(t *testing.T) {
	var tr tokens.Tracker
	if got := tr.HighWater("jobs"); got != 0 {
		t.Errorf("HighWater of an unseen fence: got %d, want 0", got)
	}
	tr.Range(func(fence string, hw tokens.Token) {
		t.Errorf("Range on an empty tracker: got %q=%d, want no call", fence, hw)
	})
}

func TestTrackerRaise(t *testing.T) {
	tests := []struct {
		name   string
		raises []tokens.Token
		want   tokens.Token
	}{
		{name: "one", raises: []tokens.Token{5}, want: 5},
		{name: "rising", raises: []tokens.Token{1, 2, 3}, want: 3},
		{name: "lower never lowers", raises: []tokens.Token{5, 3}, want: 5},
		{name: "equal", raises: []tokens.Token{5, 5}, want: 5},
		{name: "zero never lowers", raises: []tokens.Token{5, 0}, want: 5},
		{name: "zero", raises: []tokens.Token{0}, want: 0},
		{name: "mixed", raises: []tokens.Token{4, 9, 2, 9, 7}, want: 9},
		{name: "max uint64", raises: []tokens.Token{1, ^tokens.Token(0), 2}, want: ^tokens.Token(0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tr tokens.Tracker
			for _, r := range tc.raises {
				tr.Raise("jobs", r)
			}
			if got := tr.HighWater("jobs"); got != tc.want {
				t.Errorf("after Raise %v: got %d, want %d", tc.raises, got, tc.want)
			}
		})
	}
}

func TestTrackerFencesAreIndependent(t *testing.T) {
	var tr tokens.Tracker
	tr.Raise("a", 3)
	tr.Raise("b", 7)
	tr.Raise("a", 5)

	want := map[string]tokens.Token{"a": 5, "b": 7}
	for fence, hw := range want {
		if got := tr.HighWater(fence); got != hw {
			t.Errorf("HighWater(%q): got %d, want %d", fence, got, hw)
		}
	}
	if got := tr.HighWater("c"); got != 0 {
		t.Errorf("HighWater(%q): got %d, want 0", "c", got)
	}

	got := map[string]tokens.Token{}
	tr.Range(func(fence string, hw tokens.Token) {
		if _, dup := got[fence]; dup {
			t.Errorf("Range: fence %q visited twice", fence)
		}
		got[fence] = hw
	})
	if len(got) != len(want) {
		t.Errorf("Range: got %v, want %v", got, want)
	}
	for fence, hw := range want {
		if got[fence] != hw {
			t.Errorf("Range: got %q=%d, want %d", fence, got[fence], hw)
		}
	}
}

// TestTrackerConcurrentRaise raises a few fences from many goroutines in
// orders that go up and down, while readers check that no reader ever sees
// a high-water mark go down. Run with -race.
func TestTrackerConcurrentRaise(t *testing.T) {
	const (
		writers = 8
		rounds  = 2000
		readers = 4
	)
	fences := []string{"a", "b", "c"}

	var tr tokens.Tracker
	var writersWG, readersWG sync.WaitGroup
	done := make(chan struct{})

	for r := range readers {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			seen := make(map[string]tokens.Token)
			for {
				select {
				case <-done:
					return
				default:
				}
				for _, f := range fences {
					hw := tr.HighWater(f)
					if hw < seen[f] {
						t.Errorf("reader %d: high-water of %q went down from %d to %d", r, f, seen[f], hw)
						return
					}
					seen[f] = hw
				}
				tr.Range(func(f string, hw tokens.Token) {
					if hw < seen[f] {
						t.Errorf("reader %d: Range: high-water of %q went down from %d to %d", r, f, seen[f], hw)
					}
				})
			}
		}()
	}

	for w := range writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			for i := range rounds {
				// Even writers go up, odd writers come down: the
				// interleavings offer plenty of lower tokens late.
				tok := tokens.Token(i + 1)
				if w%2 == 1 {
					tok = tokens.Token(rounds - i)
				}
				tr.Raise(fences[(i+w)%len(fences)], tok)
			}
		}()
	}

	writersWG.Wait()
	close(done)
	readersWG.Wait()

	for _, f := range fences {
		if got := tr.HighWater(f); got != rounds {
			t.Errorf("HighWater(%q) after all raises: got %d, want %d", f, got, rounds)
		}
	}
}

// Many goroutines create the same fence at once: none of their raises may be
// lost to a second, overwritten entry. Each goroutine checks right after its
// own Raise that the mark is at least what it raised.
func TestTrackerConcurrentFirstRaise(t *testing.T) {
	const (
		rounds     = 200
		goroutines = 16
	)
	for round := range rounds {
		var tr tokens.Tracker
		fence := fmt.Sprint("f", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok := tokens.Token(i + 1)
				<-start
				tr.Raise(fence, tok)
				if got := tr.HighWater(fence); got < tok {
					t.Errorf("round %d: HighWater right after Raise(%d): got %d", round, tok, got)
				}
			}()
		}
		close(start)
		wg.Wait()
		if got := tr.HighWater(fence); got != goroutines {
			t.Fatalf("round %d: HighWater: got %d, want %d", round, got, goroutines)
		}
	}
}

// TestTrackerContendedRaise has writers race on one fence with interleaved,
// rising tokens. Once Raise(t) has returned, the mark must never be below t:
// a check-then-store Raise (no compare-and-swap) loses that race.
func TestTrackerContendedRaise(t *testing.T) {
	const (
		writers = 4
		rounds  = 20000
	)
	var tr tokens.Tracker
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range rounds {
				tok := tokens.Token(i*writers + w + 1)
				tr.Raise("x", tok)
				if got := tr.HighWater("x"); got < tok {
					t.Errorf("writer %d: HighWater right after Raise(%d): got %d", w, tok, got)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if got, want := tr.HighWater("x"), tokens.Token(rounds*writers); got != want {
		t.Errorf("HighWater after all raises: got %d, want %d", got, want)
	}
}

func TestCeiling(t *testing.T) {
	tests := []struct {
		term election.Term
		want tokens.Token
	}{
		{election.Term{}, 0},
		{election.Term{Rev: 7, Last: 7}, 7},
		{election.Term{Last: 9}, 9},
		{election.Term{Rev: 7, Last: 9}, 9},
		// Last >= Rev by contract; Rev counts all the same.
		{election.Term{Rev: 11, Last: 9}, 11},
		{election.Term{Rev: -1, Last: -1}, 0},
	}
	for _, tc := range tests {
		if got := tokens.Ceiling(tc.term); got != tc.want {
			t.Errorf("Ceiling(rev=%d last=%d): got %d, want %d", tc.term.Rev, tc.term.Last, got, tc.want)
		}
	}
}

func TestTrackerRaiseWithin(t *testing.T) {
	tests := []struct {
		name    string
		start   tokens.Token // raised before, with Raise
		hw      tokens.Token
		ceiling tokens.Token
		wantOK  bool
		want    tokens.Token
	}{
		{name: "below ceiling", hw: 5, ceiling: 7, wantOK: true, want: 5},
		{name: "at ceiling", hw: 7, ceiling: 7, wantOK: true, want: 7},
		{name: "above ceiling", hw: 8, ceiling: 7, wantOK: false, want: 0},
		{name: "poisoned", start: 3, hw: tokens.MaxTerm, ceiling: 7, wantOK: false, want: 3},
		{name: "nothing known", hw: 1, ceiling: 0, wantOK: false, want: 0},
		{name: "within, lower than held", start: 6, hw: 4, ceiling: 7, wantOK: true, want: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tr tokens.Tracker
			tr.Raise("jobs", tc.start)
			if got := tr.RaiseWithin("jobs", tc.hw, tc.ceiling); got != tc.wantOK {
				t.Errorf("RaiseWithin(%d, ceiling %d): got %v, want %v", tc.hw, tc.ceiling, got, tc.wantOK)
			}
			if got := tr.HighWater("jobs"); got != tc.want {
				t.Errorf("HighWater after RaiseWithin(%d, ceiling %d): got %d, want %d", tc.hw, tc.ceiling, got, tc.want)
			}
		})
	}
}
