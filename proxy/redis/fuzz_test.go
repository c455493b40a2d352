package redis

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// FuzzKeys checks check, the gate before anything is sent: whatever the
// commands, an accepted write names only keys that carry the fence's tag
// by name, none of fencegate's own keys, and holds to the arity, the size
// limits and the argument rules; and its plan snapshots every key it may
// write. Input: commands one per line, arguments separated by spaces.
//
//	go test -run '^$' -fuzz FuzzKeys -fuzztime 3m ./proxy/redis/
func FuzzKeys(f *testing.F) {
	cfg := DefaultConfig()
	cfg.Allow = OptionalCommands()
	cfg.MaxValueBytes, cfg.MaxReplyBytes = 64, 256
	b, err := newBackend("fuzz", cfg)
	if err != nil {
		f.Fatal(err)
	}
	twin, tagTwin := "", ""
	for i := 0; twin == "" || tagTwin == ""; i++ {
		if k := "collide:" + strconv.Itoa(i); twin == "" && Slot(k) == Slot("{f}") {
			twin = k
		}
		if k := "{tw" + strconv.Itoa(i) + "}:k"; tagTwin == "" && Slot(k) == Slot("{f}") {
			tagTwin = k
		}
	}
	for _, seed := range []string{
		"SET {f}:a 1",
		"SET " + twin + " pwned",
		"SET {f}:a 1\nSET " + tagTwin + " pwned",
		"SET {other}:k x",
		"SET f x",
		"GET {}{f}:k",
		"DEL x{f",
		"SET fencegate:{f}:token 9",
		"DEL fencegate:{f}:x",
		"MSET {f}:a {other} {f}:b x",
		"MSET {f}:a 1 " + twin + " 2",
		"SETRANGE {f}:big 104857599 x",
		"SETRANGE {f}:big 63 x",
		"SETRANGE {f}:big 9223372036854775807 x",
		"SETBIT {f}:big 838860792 1",
		"APPEND {f}:big xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		"LRANGE {f}:l 0 -1\nHGETALL {f}:h",
		"SRANDMEMBER {f}:s -100000000",
		"HRANDFIELD {f}:h -9 WITHVALUES",
		"COPY {f}:a {f}:b DB 1",
		"COPY {f}:a {f}:b REPLACE db 0",
		"COPY {f}:a {f}:b REPLACE",
		"MOVE {f}:a 1",
		"SWAPDB 0 1",
		"SELECT 1\nSET {f}:a 1",
		"MIGRATE 127.0.0.1 1 {f}:a 0 100",
		"LMOVE {f}:a {g}:b LEFT RIGHT",
		"RENAME {f}:a other",
		"EVAL return 0",
	} {
		f.Add("f", []byte(seed), uint64(6))
	}
	f.Fuzz(func(t *testing.T, fence string, raw []byte, tok uint64) {
		var cmds [][]string
		for line := range bytes.SplitSeq(raw, []byte("\n")) {
			cmds = append(cmds, strings.Split(string(line), " "))
		}
		tokenKey := TokenKey(fence)
		var p plan
		r := b.planOf(&p, fence, tokens.Token(tok), cmds)
		if r != nil {
			if r.Fence != fence || r.Token != tokens.Token(tok) || r.Msg == "" {
				t.Fatalf("refusal %v: got fence %q token %d, want %q %d and a message", r, r.Fence, r.Token, fence, tok)
			}
			if r.Reason != tokens.ReasonInvalidRequest && r.Reason != tokens.ReasonCommandNotAllowed {
				t.Fatalf("refusal %v: got reason %s, want INVALID_REQUEST or COMMAND_NOT_ALLOWED", r, r.Reason)
			}
			return
		}
		if fence == "" || strings.ContainsAny(fence, "{}") || tok == 0 {
			t.Fatalf("accepted fence %q token %d", fence, tok)
		}
		if p.keys[0] != tokenKey {
			t.Fatalf("plan keys[0]: got %q, want the token key %q", p.keys[0], tokenKey)
		}
		written := p.keys[1 : 1+p.nw]
		pos := argCommands
		for i, c := range cmds {
			checkAccepted(t, b, fence, i, c)
			s := commandTable[strings.ToUpper(c[0])]
			last := s.last
			if last < 0 {
				last += len(c)
			}
			for k := s.first; k <= last; k += s.step {
				if s.write && !slices.Contains(written, any(c[k])) {
					t.Fatalf("command %d %q: key %q may be written and is not snapshotted (%q)", i, c, c[k], written)
				}
				if !slices.Contains(p.keys[1:], any(c[k])) {
					t.Fatalf("command %d %q: key %q not declared in KEYS %q", i, c, c[k], p.keys)
				}
			}
			if got := p.args[pos]; got != len(c) {
				t.Fatalf("command %d: argc got %v, want %d", i, got, len(c))
			}
			if got := p.args[pos+1]; got != s.name {
				t.Fatalf("command %d: name got %v, want %s", i, got, s.name)
			}
			for j, a := range c[1:] {
				if got := p.args[pos+2+j]; got != a {
					t.Fatalf("command %d: argument %d got %v, want %q", i, j+1, got, a)
				}
			}
			pos += 1 + len(c)
		}
		if pos != len(p.args) {
			t.Fatalf("plan args: got %d, want %d", len(p.args), pos)
		}
		// The command sent: EVALSHA sha numkeys KEYS... ARGV...
		want := append(append([]any{"evalsha", script.Hash(), len(p.keys)}, p.keys...), p.args...)
		if !slices.Equal(p.cmd, want) {
			t.Fatalf("command: got %q, want %q", p.cmd, want)
		}
	})
}

// checkAccepted fails t unless command c, which check accepted, holds to
// every rule; written apart from check, from the rules themselves.
func checkAccepted(t *testing.T, b *Backend, fence string, i int, c []string) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("command %d %q accepted: %s", i, c, fmt.Sprintf(format, args...))
	}
	name := strings.ToUpper(c[0])
	s, ok := commandTable[name]
	switch {
	case !ok:
		fail("not in the table")
	case refusedFamilies[name] != "":
		fail("refused family: %s", refusedFamilies[name])
	case s.arity > 0 && len(c) != s.arity, s.arity < 0 && len(c) < -s.arity:
		fail("arity %d", s.arity)
	}
	last := s.last
	if last < 0 {
		last += len(c)
		if (last-s.first+1)%s.step != 0 {
			fail("keys and values do not pair up")
		}
	}
	for k := s.first; k <= last; k += s.step {
		key := c[k]
		tag, tagged := clusterTag(key)
		switch {
		case !tagged || tag != fence:
			fail("key %q has tag %q (%v), want {%s}", key, tag, tagged, fence)
		case hashTag(key) != fence:
			fail("key %q: hashTag %q, want %q", key, hashTag(key), fence)
		case Slot(key) != Slot(TokenKey(fence)):
			fail("key %q in slot %d, the fence's is %d", key, Slot(key), Slot(TokenKey(fence)))
		case strings.HasPrefix(key, reservedPrefix):
			fail("key %q is reserved", key)
		}
	}
	maxValue, maxReply := int64(b.cfg.MaxValueBytes), int64(b.cfg.MaxReplyBytes)
	for j, a := range c {
		if int64(len(a)) > maxValue {
			fail("argument %d is %d bytes, over %d", j, len(a), maxValue)
		}
	}
	num := func(j int) int64 {
		t.Helper()
		n, err := strconv.ParseInt(c[j], 10, 64)
		if err != nil {
			fail("argument %d %q is not an integer", j, c[j])
		}
		return n
	}
	switch name {
	case "SETRANGE":
		if off := num(2); off < 0 || off+int64(len(c[3])) > maxValue {
			fail("SETRANGE makes %d bytes", off+int64(len(c[3])))
		}
	case "SETBIT":
		if off := num(2); off < 0 || off/8+1 > maxValue {
			fail("SETBIT makes %d bytes", off/8+1)
		}
	case "COPY":
		for _, a := range c[3:] {
			if strings.EqualFold(a, "db") {
				fail("COPY to another database")
			}
		}
	case "SRANDMEMBER", "HRANDFIELD":
		if len(c) > 2 {
			per := int64(elementCost)
			if len(c) > 3 {
				per *= 2
			}
			if n := num(2); n < 0 && (n == -n || -n > maxReply/per) {
				fail("%s of %d elements", name, n)
			}
		}
	}
}

// clusterTag is the hash tag as the Redis Cluster specification states
// it: after the first '{', up to the first '}' after it, when that is not
// empty.
func clusterTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return key[open+1 : open+1+end], true
}
