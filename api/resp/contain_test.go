package resp_test

import (
	"testing"

	"github.com/fencegate/fencegate/api/resp"
)

// TestPanicEndsOneConnection: a panic in a session (a bug) ends its
// connection alone; another client's commands go on. Without the
// recover in handle, the panic ends the process (the test binary dies).
func TestPanicEndsOneConnection(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("contain")
	tok, _ := e.lead(t, f)
	victim := authRaw(t, e, f, tok)
	other := authRaw(t, e, f, tok)
	e.srv.SetTestHookCommand(func(args []string) {
		if len(args) == 2 && args[0] == "ECHO" && args[1] == "panic" {
			panic("test: a bug in a RESP session")
		}
	})
	victim.send(cmd("ECHO", "panic"))
	victim.closed()
	key := "{" + f + "}:k"
	other.send(cmd("SET", key, "v"))
	other.want("+OK")
	if got := e.stored(t, key); got != "v" {
		t.Errorf("stored %q, want v", got)
	}
}
