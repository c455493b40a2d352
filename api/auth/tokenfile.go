package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

const tokenFlag = "--token-auth-file"

// tokenSet is a loaded token file. Only hashes of the secrets are kept.
type tokenSet struct {
	principals []string // "token:<name>"
	sums       [][sha256.Size]byte
}

// lookup returns the principal whose secret is secret. It hashes secret and
// compares the hash with every entry in constant time, without stopping at
// a match, so neither the timing nor a map probe tells how close a guess
// came or which entry it matched.
func (ts *tokenSet) lookup(secret string) (string, bool) {
	if secret == "" {
		return "", false // no secret is no credential, whatever the file says
	}
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range ts.sums {
		eq := subtle.ConstantTimeCompare(sum[:], ts.sums[i][:])
		notYet := subtle.ConstantTimeEq(int32(found), -1)
		found = subtle.ConstantTimeSelect(eq&notYet, i, found)
	}
	if found < 0 {
		return "", false
	}
	return ts.principals[found], true
}

// emptySecret is the sha256 of the empty string.
var emptySecret = sha256.Sum256(nil)

// parseTokens reads a token file: "<name> <sha256 hex of the secret>" per
// line, "#" comments and blank lines. Names and secrets must be unique.
func parseTokens(path string, b []byte) (*tokenSet, error) {
	ts := &tokenSet{}
	names := map[string]int{}
	sums := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		lineErr := func(format string, args ...any) error {
			return &FileError{Flag: tokenFlag, Path: path + ":" + strconv.Itoa(n), Err: fmt.Errorf(format, args...)}
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, lineErr("want <name> <sha256 hex of the secret>, got %d fields", len(f))
		}
		name, hx := f[0], f[1]
		var sum [sha256.Size]byte
		if len(hx) != 2*sha256.Size {
			return nil, lineErr("token %q: want 64 hex digits (the sha256 of the secret, never the secret), got %d characters", name, len(hx))
		}
		if _, err := hex.Decode(sum[:], []byte(hx)); err != nil {
			return nil, lineErr("token %q: want 64 hex digits (the sha256 of the secret), %v", name, err)
		}
		if sum == emptySecret {
			// What sha256sum writes for an unset variable: a secret
			// anyone can send.
			return nil, lineErr("token %q: that is the sha256 of the empty string; a secret must not be empty", name)
		}
		if prev, dup := names[name]; dup {
			return nil, lineErr("token %q again (also on line %d)", name, prev)
		}
		if prev, dup := sums[sum]; dup {
			return nil, lineErr("token %q has the same secret as line %d", name, prev)
		}
		names[name], sums[sum] = n, n
		ts.principals = append(ts.principals, "token:"+name)
		ts.sums = append(ts.sums, sum)
	}
	if err := sc.Err(); err != nil {
		return nil, fileError(tokenFlag, path, err)
	}
	return ts, nil
}

func loadTokens(path string) (*tokenSet, error) {
	b, err := readFile(tokenFlag, path)
	if err != nil {
		return nil, err
	}
	return parseTokens(path, b)
}
