package resp

import (
	"strings"
	"testing"
)

// TestKindOfAllocs: classifying a command, on every command, allocates
// nothing.
func TestKindOfAllocs(t *testing.T) {
	for _, name := range []string{"set", "SET", "hgetall", "Ping", "unwatch", "zrangebyscore", "zadd", "zpopmin"} {
		args := []string{name, "k", "xx", "incr", "withscores"}
		// AllocsPerRun counts the whole process's allocations, so a
		// goroutine left running by another test adds to a run (CI once
		// saw 5 for zpopmin); the fewest of a few runs is the function's.
		n := testing.AllocsPerRun(100, func() { _ = kindOf(name); _ = shapeOf(args) })
		for i := 0; i < 4 && n != 0; i++ {
			n = min(n, testing.AllocsPerRun(100, func() { _ = kindOf(name); _ = shapeOf(args) }))
		}
		if n != 0 {
			t.Errorf("kindOf(%q): got %v allocations, want 0", name, n)
		}
	}
	for _, tt := range []struct {
		name string
		want kind
	}{{"set", kindData}, {"ping", kindPing}, {"HeLLo", kindHello}, {"multi", kindMulti}, {"exec", kindExec}, {"execute", kindData}} {
		if got := kindOf(tt.name); got != tt.want {
			t.Errorf("kindOf(%q): got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestShapeOfShortCommands: a command too short for its options (which
// never gets a reply from Redis, only an error) does not make shapeOf
// panic.
func TestShapeOfShortCommands(_ *testing.T) {
	for _, args := range [][]string{{}, {"SET"}, {"set", "k"}, {"ZADD"}, {"ZRANGE", "k", "0"}, {"HRANDFIELD"}, {"ZPOPMIN"}, {"LPOP"}} {
		_ = shapeOf(args)
	}
}

// TestDoubleNeverSplitsTheStream: a text with a line end written as a
// double stays one bulk string reply.
func TestDoubleNeverSplitsTheStream(t *testing.T) {
	var b strings.Builder
	w := newWriter(&b)
	w.resp3 = true
	w.double("1.5")
	w.double("1\r\n:7")
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), ",1.5\r\n$5\r\n1\r\n:7\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// BenchmarkKindOf: classifying the data commands of a mixed workload,
// which every command goes through.
func BenchmarkKindOf(b *testing.B) {
	names := []string{"SET", "get", "INCR", "hset", "EXPIRE", "lpush", "ZADD", "del"}
	for i := 0; b.Loop(); i++ {
		if kindOf(names[i%len(names)]) != kindData {
			b.Fatal("not data")
		}
	}
}
