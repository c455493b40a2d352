// Package suggest finds what a mistyped command or flag name was meant to
// be, for the "did you mean" of a usage error, as git and kubectl print
// it. It only ranks names; the caller decides what to print.
package suggest

import (
	"fmt"
	"strings"
)

// maxDistance is the most edits (insertions, deletions, substitutions,
// swaps of two adjacent letters) a typo is taken to have.
const maxDistance = 2

// Closest returns the names in choices that input most likely meant: the
// only one input is a prefix of, else those nearest to it within two
// edits (and fewer edits than input has letters: "v" is not a typo of
// "w"), in the order of choices. Case is ignored. None when nothing is
// close.
func Closest(input string, choices []string) []string {
	in := strings.ToLower(input)
	if in == "" {
		return nil
	}
	var prefixed []string
	for _, c := range choices {
		if strings.HasPrefix(strings.ToLower(c), in) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed
	}
	best, out := maxDistance+1, []string(nil)
	for _, c := range choices {
		switch d := distance(in, strings.ToLower(c)); {
		case d > maxDistance || d >= len([]rune(in)):
		case d < best:
			best, out = d, []string{c}
		case d == best:
			out = append(out, c)
		}
	}
	return out
}

// Hint is "; did you mean X?" (or "X or Y") for input among choices,
// each written as format writes it (e.g. "%q", or "--%s" for flags), or
// "" when nothing is close.
func Hint(input string, choices []string, format string) string {
	names := Closest(input, choices)
	if len(names) == 0 {
		return ""
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf(format, n)
	}
	return "; did you mean " + strings.Join(quoted, " or ") + "?"
}

// distance is the optimal string alignment distance between a and b:
// Levenshtein's, with a swap of two adjacent letters counting as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows: two back for the swap, one back, and this one.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
