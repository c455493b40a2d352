package resp_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// TestLocalCommands: what fencegate answers itself, in RESP2 and RESP3,
// byte for byte where clients depend on it.
func TestLocalCommands(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("loc")
	tok, _ := e.lead(t, f)
	r := e.raw(t)
	steps := []struct {
		send string
		want []string
	}{
		{cmd("PING"), []string{"+PONG"}},
		{"PING\r\n", []string{"+PONG"}}, // inline
		{cmd("ECHO", "hi"), []string{"$2", "hi"}},
		{cmd("SELECT", "0"), []string{"+OK"}},
		{cmd("CLIENT", "SETNAME", "w1"), []string{"+OK"}},
		{cmd("CLIENT", "GETNAME"), []string{"$2", "w1"}},
		{cmd("CLIENT", "SETINFO", "LIB-NAME", "x"), []string{"+OK"}},
		{cmd("CLIENT", "KILL", "ID", "1"), []string{"-ERR fencegate: CLIENT KILL is not supported"}},
		{cmd("COMMAND", "DOCS"), []string{"*0"}},
		{cmd("COMMAND", "COUNT"), []string{":0"}},
		// ioredis's ready check: INFO, then loading:0.
		{cmd("INFO"), []string{"$", "# Server", "redis_version:7.0.0", "redis_mode:standalone", "proxy:fencegate", "", "# Persistence", "loading:0", "", "# Replication", "role:master", ""}},
		{cmd("info", "Persistence"), []string{"$26", "# Persistence", "loading:0", ""}},
		{cmd("INFO", "keyspace"), []string{"$0", ""}},
		{cmd("INFO", "replication", "server"), []string{"$", "# Server", "redis_version:7.0.0", "redis_mode:standalone", "proxy:fencegate", "", "# Replication", "role:master", ""}},
		// Redis without cluster mode: rueidis connects by CLUSTER SLOTS.
		{cmd("CLUSTER", "SLOTS"), []string{"-ERR This instance has cluster support disabled"}},
		{cmd("HELLO", "4"), []string{"-NOPROTO "}},
		{cmd("HELLO", "3", "AUTH", f, "x"), []string{"-INVALID_TOKEN "}},
		{cmd("HELLO", "3", "AUTH", f, strconv.FormatUint(tok, 10), "SETNAME", "w2"), []string{"%7", "$6", "server", "$5", "redis", "$7", "version", "$5", "7.0.0", "$5", "proto", ":3"}},
		{"", []string{"$2", "id"}},
		{"", []string{":"}},
		{"", []string{"$4", "mode", "$10", "standalone", "$4", "role", "$6", "master", "$7", "modules", "*0"}},
		{cmd("GET", "{"+f+"}:missing"), []string{"_"}}, // RESP3 null
		{cmd("readonly"), []string{"-ERR This instance has cluster support disabled"}},
		{cmd("CLIENT", "GETNAME"), []string{"$2", "w2"}},
		{cmd("RESET"), []string{"+RESET"}},
		{cmd("GET", "{"+f+"}:missing"), []string{"-NOAUTH "}},
		{cmd("HELLO"), []string{"*14"}}, // RESP2 after RESET: a flat array
	}
	for _, s := range steps {
		if s.send != "" {
			r.send(s.send)
		}
		for _, w := range s.want {
			r.want(w)
		}
	}
	for range 25 { // the rest of the RESP2 HELLO reply
		r.line()
	}
	r.send(cmd("QUIT"))
	r.want("+OK")
	r.closed()
}

// TestShutdown: Shutdown closes an idle connection at once, without
// waiting for its client.
func TestShutdown(t *testing.T) {
	e := newEnv(t, resp.Config{})
	r := e.raw(t)
	r.send(cmd("PING"))
	r.want("+PONG")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	r.closed()
}
