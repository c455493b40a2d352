package redislease

import (
	"fmt"
	"strings"
	"testing"
)

// bruteOverlap looks for fence names a, b of 1 to maxLen bytes with
// Sprintf(p, a) == Sprintf(q, b), and for two names that share a key of
// one pattern, by trying them all. Names are drawn from the fence characters the
// patterns hold plus one they do not: in a key both patterns make, a
// byte of a name is either some pattern's fixed byte or, against the
// other's name, any fence character, so replacing every character the
// patterns do not hold by one such keeps the match.
func bruteOverlap(p, q string, maxLen int) (a, b string, found, selfCollides bool) {
	alphabet := []byte{}
	for _, c := range []byte(p + q) {
		if fenceChar(c) && !strings.ContainsRune(string(alphabet), rune(c)) {
			alphabet = append(alphabet, c)
		}
	}
	for _, c := range []byte("zZ9_") {
		if !strings.ContainsRune(string(alphabet), rune(c)) {
			alphabet = append(alphabet, c)
			break
		}
	}
	names := allNames(string(alphabet), maxLen)
	pp, ps, _ := strings.Cut(p, "%s")
	qp, qs, _ := strings.Cut(q, "%s")
	leases := make(map[string]string, len(names))
	counters := make(map[string]bool, len(names))
	for _, n := range names {
		if _, dup := leases[pp+n+ps]; dup {
			selfCollides = true
		}
		leases[pp+n+ps] = n
		if counters[qp+n+qs] {
			selfCollides = true
		}
		counters[qp+n+qs] = true
	}
	for _, n := range names {
		if l, ok := leases[qp+n+qs]; ok {
			return l, n, true, selfCollides
		}
	}
	return "", "", false, selfCollides
}

var nameCache = map[string][]string{}

// allNames are the names of 1 to maxLen bytes over alphabet, shortest
// first.
func allNames(alphabet string, maxLen int) []string {
	id := fmt.Sprint(alphabet, maxLen)
	if names, ok := nameCache[id]; ok {
		return names
	}
	var names []string
	level := []string{""}
	for range maxLen {
		var next []string
		for _, n := range level {
			for _, c := range []byte(alphabet) {
				next = append(next, n+string(c))
			}
		}
		names = append(names, next...)
		level = next
	}
	nameCache[id] = names
	return names
}

// TestOverlapMatchesBruteForce checks overlap, which tries key lengths up
// to the patterns' fixed bytes + 2 only, against every pair of names up
// to the fixed bytes + 3 (so every key length up to one past that bound,
// and longer keys of the shorter pattern too), for every pair of patterns
// whose fixed parts total at most three bytes of 'a', '-' and ':', and a
// few more.
func TestOverlapMatchesBruteForce(t *testing.T) {
	var parts []string
	level := []string{""}
	for range 3 {
		parts = append(parts, level...)
		var next []string
		for _, s := range level {
			for _, c := range "a-:" {
				next = append(next, s+string(c))
			}
		}
		level = next
	}
	parts = append(parts, level...)
	type pair struct{ p, q string }
	pairs := []pair{
		{"%s.t", "l.%s"},
		{"x%s", "%sx"},
		{"{%s}", "{%s}:"},
		{"_%s", "%s_"},
	}
	for _, pp := range parts {
		for _, ps := range parts {
			for _, qp := range parts {
				for _, qs := range parts {
					if len(pp)+len(ps)+len(qp)+len(qs) <= 3 {
						pairs = append(pairs, pair{pp + "%s" + ps, qp + "%s" + qs})
					}
				}
			}
		}
	}
	collide := 0
	for _, tc := range pairs {
		maxLen := len(tc.p) + len(tc.q) - 4 + 3 // see above
		ba, bb, want, self := bruteOverlap(tc.p, tc.q, maxLen)
		if self {
			t.Errorf("%q / %q: two names share a key of one pattern", tc.p, tc.q)
		}
		a, b, got := overlap(tc.p, tc.q)
		switch {
		case got != want:
			t.Errorf("overlap(%q, %q): got %v (%q, %q), want %v (brute force: %q, %q)", tc.p, tc.q, got, a, b, want, ba, bb)
		case got && (a == "" || b == "" || fmt.Sprintf(tc.p, a) != fmt.Sprintf(tc.q, b) ||
			strings.IndexFunc(a+b, func(r rune) bool { return r > 127 || !fenceChar(byte(r)) }) >= 0):
			t.Errorf("overlap(%q, %q): example %q, %q makes keys %q and %q", tc.p, tc.q, a, b, fmt.Sprintf(tc.p, a), fmt.Sprintf(tc.q, b))
		}
		if got {
			collide++
		}
	}
	if collide == 0 || collide == len(pairs) {
		t.Errorf("%d of %d pairs collide: the cases test nothing", collide, len(pairs))
	}
	t.Logf("%d pairs, %d collide", len(pairs), collide)
}

func TestValidatePatterns(t *testing.T) {
	for _, tc := range []struct {
		key, counter string
		bad          string // the error; "" for valid
	}{
		{DefaultKeyPattern, DefaultCounterPattern, ""},
		{"lease:{%s}", "lease:{%s}:token", ""},
		{"{%s}:lease", "{%s}:token", ""},
		{"{%s}:lease", "{%s}:lease:token", ""},
		{"lease-%s:", "lease-%s:token", ""},
		{"lease-%s", "lease-%s-token", `redislease: key pattern "lease-%s" and counter pattern "lease-%s-token" overlap: ` +
			`fence "a-token"'s lease key is fence "a"'s counter key, "lease-a-token"; give both the same text before %s, ` +
			`and after it texts that differ and each start with a character fence names cannot hold (such as ':') or are empty, ` +
			`as the defaults "lease:%s" and "lease:%s:token" do`},
		// ':' right after %s in both is not enough on its own.
		{"%s:x:", "a:%s:", `fence "a"'s lease key is fence "x"'s counter key, "a:x:"`},
		{"lock.%s.fence", "lock.%s", `fence "a"'s lease key is fence "a.fence"'s counter key`},
		{"l:%s", "l:%s", `the key pattern and the counter pattern are both "l:%s"`},
		{"lease", "lease:%s:token", "exactly one %s"},
		{"lease:%s", "{x}%s", "hash tag"},
		{"%s-x", "y-%s", `fence "y"'s lease key is fence "x"'s counter key, "y-x"`},
	} {
		err := ValidatePatterns("key pattern", tc.key, "counter pattern", tc.counter)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%q / %q: got %v, want valid", tc.key, tc.counter, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%q / %q: got %v, want an error with %q", tc.key, tc.counter, err, tc.bad)
		case err != nil && strings.ContainsAny(err.Error(), "\n\r"):
			t.Errorf("%q / %q: error %q is more than one line", tc.key, tc.counter, err)
		}
	}
}
