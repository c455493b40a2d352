package redislease

import (
	"fmt"
	"strings"
)

// ValidatePatterns checks a lease key pattern and a counter key pattern
// together: each as ValidatePattern does, and that no fence's lease key
// can be any fence's counter key. Fence names may hold '.', '_' and '-',
// so "lease-%s" and "lease-%s-token" fail: fence "X-token"'s lease key
// is fence X's counter, whose INCR would then hold X-token's lease for
// ever. The error, one line, names both patterns (after keyWhat and
// counterWhat) and two such fences.
//
// Two fences never share a lease key, nor a counter key: with one %s, a
// key's length fixes the name's, and the name is the key less the
// pattern's fixed prefix and suffix.
func ValidatePatterns(keyWhat, keyPattern, counterWhat, counterPattern string) error {
	if err := ValidatePattern(keyWhat, keyPattern); err != nil {
		return err
	}
	if err := ValidatePattern(counterWhat, counterPattern); err != nil {
		return err
	}
	if keyPattern == counterPattern {
		return fmt.Errorf("redislease: the %s and the %s are both %q", keyWhat, counterWhat, keyPattern)
	}
	if a, b, ok := overlap(keyPattern, counterPattern); ok {
		return fmt.Errorf("redislease: %s %q and %s %q overlap: fence %q's lease key is fence %q's counter key, %q; "+
			"give both the same text before %%s, and after it texts that differ and each start with a character fence names cannot hold (such as ':') or are empty, as the defaults %q and %q do",
			keyWhat, keyPattern, counterWhat, counterPattern, a, b, fmt.Sprintf(keyPattern, a), DefaultKeyPattern, DefaultCounterPattern)
	}
	return nil
}

// fenceChar reports whether c may be in a fence name
// (election.ValidFenceName), at any place: a superset of the names, so
// that overlap misses none.
func fenceChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '-'
}

// overlap finds non-empty names a and b over fenceChar with
// Sprintf(p, a) == Sprintf(q, b), if any. p and q hold one %s and no
// other %.
//
// Each pattern, laid out at a key length n, is its prefix, a run of
// wildcards (the name, at least one) and its suffix; the two match when
// every place does: equal fixed bytes, a fixed fence character against a
// wildcard, or two wildcards. Past n = the longer prefix + the longer
// suffix + 1 the places between those are all two wildcards, and every
// other place is what it was at that n, so a longer match means a match
// at that n: lengths up to the sum of both fixed parts + 2 are enough.
func overlap(p, q string) (a, b string, ok bool) {
	pp, ps, _ := strings.Cut(p, "%s")
	qp, qs, _ := strings.Cut(q, "%s")
	bound := len(pp) + len(ps) + len(qp) + len(qs) + 2
	for n := 1; n <= bound; n++ {
		if n <= len(pp)+len(ps) || n <= len(qp)+len(qs) {
			continue // no room for a name in one of them
		}
		if key, ok := match(pp, ps, qp, qs, n); ok {
			return string(key[len(pp) : n-len(ps)]), string(key[len(qp) : n-len(qs)]), true
		}
	}
	return "", "", false
}

// match lays out both patterns (prefix, name, suffix) at key length n and
// returns a key both make, if any: a wildcard takes the other's fixed
// byte, or 'a' against a wildcard.
func match(pp, ps, qp, qs string, n int) ([]byte, bool) {
	key := make([]byte, n)
	for i := range key {
		x, xw := place(pp, ps, n, i)
		y, yw := place(qp, qs, n, i)
		switch {
		case xw && yw:
			key[i] = 'a'
		case xw && fenceChar(y):
			key[i] = y
		case yw && fenceChar(x):
			key[i] = x
		case !xw && !yw && x == y:
			key[i] = x
		default:
			return nil, false
		}
	}
	return key, true
}

// place is byte i of a key of length n laid out from prefix, a name and
// suffix: the fixed byte, or wild when it is the name's.
func place(prefix, suffix string, n, i int) (c byte, wild bool) {
	switch {
	case i < len(prefix):
		return prefix[i], false
	case i >= n-len(suffix):
		return suffix[i-(n-len(suffix))], false
	}
	return 0, true
}
