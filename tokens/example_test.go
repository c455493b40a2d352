package tokens_test

import (
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

func ExampleParse() {
	for _, s := range []string{"42", "", "0", "-1", "0x2A"} {
		t, err := tokens.Parse(s)
		fmt.Printf("%q: %d %v\n", s, t, err)
	}
	// Output:
	// "42": 42 <nil>
	// "": 0 tokens: missing fencing token
	// "0": 0 tokens: invalid fencing token
	// "-1": 0 tokens: invalid fencing token
	// "0x2A": 0 tokens: invalid fencing token
}

func ExampleDecide() {
	var tr tokens.Tracker
	tr.Raise("jobs", 40) // a write with token 40 was accepted earlier
	term := election.Term{Election: "jobs", Rev: 42, Last: 42}

	for _, t := range []tokens.Token{39, 41, 42, 43} {
		fmt.Println(t, tokens.Decide(t, tr.HighWater("jobs"), term))
	}
	// Output:
	// 39 stale
	// 41 stale
	// 42 accept
	// 43 verify
}

func ExampleRefusalError() {
	err := fmt.Errorf("exec: %w", tokens.Refuse(tokens.ReasonStaleToken, "jobs", 41, "below high-water %d", 42))

	fmt.Println(errors.Is(err, tokens.ErrStale))
	if r, ok := tokens.AsRefusal(err); ok {
		fmt.Println(r.Reason.Label(), r.Fence, r.Token)
	}
	// Output:
	// true
	// stale_token jobs 41
}
