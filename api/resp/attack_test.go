package resp_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
)

// raw is a client connection speaking RESP by hand.
type raw struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (e *env) raw(t *testing.T) *raw {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &raw{t: t, c: c, br: bufio.NewReader(c)}
}

// cmd encodes a command as a RESP array.
func cmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func (r *raw) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

// line reads one reply's first line (the whole reply for all but bulk
// strings and aggregates).
func (r *raw) line() string {
	r.t.Helper()
	l, err := r.br.ReadString('\n')
	if err != nil {
		r.t.Fatalf("reading a reply: %v (got %q)", err, l)
	}
	return strings.TrimRight(l, "\r\n")
}

// closed checks the server closed the connection.
func (r *raw) closed() {
	r.t.Helper()
	if l, err := r.br.ReadString('\n'); err == nil {
		r.t.Fatalf("got %q, want the connection closed", l)
	}
}

// reset checks the server no longer reads the connection: a client that
// goes on writing has it reset within two seconds.
func (r *raw) reset() {
	r.t.Helper()
	chunk := make([]byte, 64<<10)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := r.c.Write(chunk); err != nil {
			return
		}
	}
	r.t.Fatal("the server still read what the client sent after closing")
}

func (r *raw) want(prefix string) {
	r.t.Helper()
	if got := r.line(); !strings.HasPrefix(got, prefix) {
		r.t.Fatalf("got reply %q, want %q...", got, prefix)
	}
}

// TestAttackCommands: commands outside the fence's keys or the allowlist
// are refused and change nothing in Redis; the connection keeps working.
func TestAttackCommands(t *testing.T) {
	e := newEnv(t, resp.Config{})
	ctx := t.Context()
	f := unique("atk")
	tok, _ := e.lead(t, f)
	if err := e.admin.Set(ctx, "sentinel", "keep", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.raw(t)
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", "plain", "x"}, "-INVALID_REQUEST fencegate: "},
		{[]string{"SET", "{other}:k", "x"}, "-INVALID_REQUEST fencegate: "},
		{[]string{"SET", "fencegate:{" + f + "}:token", "1"}, "-INVALID_REQUEST fencegate: "},
		{[]string{"MSET", "{" + f + "}:a", "1", "sentinel", "x"}, "-INVALID_REQUEST fencegate: "},
		{[]string{"EVAL", "redis.call('SET', 'evil', '1')", "0"}, "-COMMAND_NOT_ALLOWED fencegate: "},
		{[]string{"CONFIG", "SET", "maxmemory", "1"}, "-COMMAND_NOT_ALLOWED fencegate: "},
		{[]string{"FLUSHALL"}, "-COMMAND_NOT_ALLOWED fencegate: "},
		{[]string{"SUBSCRIBE", "ch"}, "-COMMAND_NOT_ALLOWED fencegate: "},
		{[]string{"BLPOP", "{" + f + "}:l", "0"}, "-COMMAND_NOT_ALLOWED fencegate: "},
		{[]string{"SELECT", "1"}, "-COMMAND_NOT_ALLOWED fencegate: "},
		{[]string{"WATCH", "{" + f + "}:a"}, "-COMMAND_NOT_ALLOWED fencegate: "},
		{[]string{"PING"}, "+PONG"},
	} {
		r.send(cmd(tt.args...))
		if got := r.line(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%v: got %q, want %q...", tt.args, got, tt.want)
		}
	}
	if got := e.stored(t, "sentinel"); got != "keep" {
		t.Errorf("sentinel key: got %q, want keep (FLUSHALL or MSET got through)", got)
	}
	for _, k := range []string{"plain", "{other}:k", "evil", "{" + f + "}:a"} {
		if got := e.stored(t, k); got != "" {
			t.Errorf("key %s: got %q stored, want nothing", k, got)
		}
	}
	if mm, err := e.admin.ConfigGet(ctx, "maxmemory").Result(); err != nil || mm["maxmemory"] == "1" {
		t.Errorf("maxmemory: got %v, %v; CONFIG SET got through", mm, err)
	}
}

// TestAttackBeforeAuth: data commands before AUTH get NOAUTH and store
// nothing, also when pipelined ahead of the AUTH in one packet and inside
// MULTI.
func TestAttackBeforeAuth(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("noauth")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:k"
	r := e.raw(t)
	r.send(cmd("SET", k, "early") + cmd("MULTI") + cmd("SET", k, "tx") + cmd("EXEC") +
		cmd("AUTH", f, strconv.FormatUint(tok, 10)) + cmd("GET", k))
	r.want("-NOAUTH ")
	r.want("+OK")
	r.want("-NOAUTH ")
	r.want("-EXECABORT ")
	r.want("+OK")
	r.want("$-1")
	if got := e.stored(t, k); got != "" {
		t.Errorf("key written before AUTH: got %q, want nothing", got)
	}
	// AUTH with a bad token or fence is refused and leaves the connection
	// unauthenticated.
	r2 := e.raw(t)
	r2.send(cmd("AUTH", f, "abc") + cmd("AUTH", "bad/fence", "5") + cmd("AUTH", "7") + cmd("SET", k, "x"))
	r2.want("-INVALID_TOKEN fencegate: ")
	r2.want("-INVALID_REQUEST fencegate: ")
	r2.want("-WRONGPASS fencegate: ")
	r2.want("-NOAUTH ")
}

// TestAttackBeforeAuthLimits: before AUTH a command is held to Redis's
// limits for unauthenticated clients (10 arguments, bulk strings of 16384
// bytes), so a client nobody has let in cannot make fencegate read and
// hold a megabyte per connection, nor read what it goes on sending after
// the error (no linger); after AUTH the configured limits apply.
func TestAttackBeforeAuthLimits(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("preauth")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:k"
	for _, tt := range []struct {
		name, send, want string
	}{
		{"bulk", cmd("AUTH", f, strings.Repeat("1", 16385)), "-ERR Protocol error: unauthenticated bulk length"},
		{"bulk announced", "*2\r\n$4\r\nAUTH\r\n$1000000\r\n", "-ERR Protocol error: unauthenticated bulk length"},
		{"args", cmd("HELLO", "3", "AUTH", f, "1", "SETNAME", "a", "SETNAME", "b", "SETNAME", "c"), "-ERR Protocol error: unauthenticated multibulk length"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.raw(t)
			r.send(cmd("PING") + tt.send)
			r.want("+PONG")
			r.want(tt.want)
			r.closed()
			r.reset()
		})
	}
	// The same bulk after AUTH is an ordinary argument.
	r := e.raw(t)
	big := strings.Repeat("v", 100000)
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)) + cmd("SET", k, big))
	r.want("+OK")
	r.want("+OK")
	if got := e.stored(t, k); got != big {
		t.Errorf("after AUTH: stored %d bytes, want %d", len(got), len(big))
	}
	// RESET logs the connection out: the limits apply again.
	r.send(cmd("RESET") + cmd("ECHO", big))
	r.want("+RESET")
	r.want("-ERR Protocol error: unauthenticated bulk length")
	r.closed()
}

// TestAttackNoAuth: a connection that does not AUTH within AuthTimeout,
// from its start or from RESET, is told so and closed, so connections
// that never log in cannot hold the listener's connection slots; one
// that logged in may stay idle. RESET restarts the clock only for a
// connection that had logged in, and CLUSTER, answered without a token,
// not at all.
func TestAttackNoAuth(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newEnv(t, resp.Config{AuthTimeout: timeout})
	f := unique("authtime")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:k"

	never := e.raw(t)
	never.send(cmd("PING"))
	never.want("+PONG")
	start := time.Now()
	never.want("-ERR fencegate: no AUTH within 300ms")
	never.closed()
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("closed after %v, want about %v", waited, timeout)
	}

	// Neither RESET before any AUTH nor the commands fencegate answers
	// itself (CLUSTER, which needs no token) restart the clock.
	for _, c := range []struct{ send, reply string }{
		{cmd("RESET"), "+RESET"},
		{cmd("CLUSTER", "SLOTS"), "-ERR This instance has cluster support disabled"},
	} {
		conn := e.raw(t)
		start = time.Now()
		for closed := false; !closed; {
			if waited := time.Since(start); waited >= 10*timeout {
				t.Fatalf("a client sending %q without AUTH was still served after %v (AuthTimeout %v)", c.send, waited, timeout)
			}
			conn.send(c.send)
			if l := conn.line(); l != c.reply {
				if !strings.HasPrefix(l, "-ERR fencegate: no AUTH within 300ms") {
					t.Fatalf("got reply %q, want %q or the AUTH timeout", l, c.reply)
				}
				closed = true
			}
			time.Sleep(timeout / 6)
		}
	}

	r := e.raw(t)
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)))
	r.want("+OK")
	time.Sleep(3 * timeout)
	r.send(cmd("SET", k, "1"))
	r.want("+OK")
	r.send(cmd("RESET"))
	r.want("+RESET")
	r.want("-ERR fencegate: no AUTH within 300ms")
	r.closed()
}

// TestAttackTokens: stale and forged tokens are refused, nothing stored,
// whether sent alone, pipelined or in MULTI.
func TestAttackTokens(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("tok")
	old, cur := e.succession(t, f)
	for _, tt := range []struct {
		name  string
		token uint64
		want  string
	}{
		{"stale", old, "-STALE_TOKEN fencegate: "},
		{"forged", cur + 1000, "-UNKNOWN_TERM fencegate: "},
	} {
		k := "{" + f + "}:" + tt.name
		r := e.raw(t)
		r.send(cmd("AUTH", f, strconv.FormatUint(tt.token, 10)))
		r.want("+OK")
		r.send(cmd("SET", k, "1") + cmd("SET", k+"p1", "1") + cmd("INCR", k+"p2") + cmd("MULTI") + cmd("SET", k+"m", "1") + cmd("EXEC"))
		r.want(tt.want)
		r.want(tt.want)
		r.want(tt.want)
		r.want("+OK")
		r.want("+QUEUED")
		r.want(tt.want)
		for _, s := range []string{"", "p1", "p2", "m"} {
			if got := e.stored(t, k+s); got != "" {
				t.Errorf("%s token: key %s got %q stored, want nothing", tt.name, k+s, got)
			}
		}
	}
}

// TestAttackOversized: a bulk string or argument count over the limits is
// a protocol error that closes the connection; nothing of it runs, and
// the length is refused before any of its bytes are awaited. A client
// still sending gets to read the error (linger).
func TestAttackOversized(t *testing.T) {
	e := newEnv(t, resp.Config{MaxBulkBytes: 1024, MaxArgs: 8, MaxInlineBytes: 256})
	f := unique("big")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:k"
	for _, tt := range []struct {
		name, send, want string
	}{
		{"bulk", cmd("SET", k, strings.Repeat("x", 1025)), "-ERR Protocol error: bulk length over the limit of 1024"},
		{"bulk announced", "*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$99999999999\r\n", "-ERR Protocol error: bulk length over the limit"},
		// Sent whole before the client reads, as redis-cli -x does: the
		// error must not be lost to a connection reset under the write.
		{"bulk sent whole", cmd("SET", k, strings.Repeat("x", 16<<20)), "-ERR Protocol error: bulk length over the limit of 1024"},
		{"args", cmd("MSET", k, "1", k, "2", k, "3", k, "4"), "-ERR Protocol error: multibulk length over the limit of 8"},
		{"inline", "SET " + k + " " + strings.Repeat("y", 300) + "\r\n", "-ERR Protocol error: too big inline request"},
		{"not bulk", "*2\r\n:1\r\n:2\r\n", "-ERR Protocol error: expected '$'"},
		{"bad length", "*x\r\n", "-ERR Protocol error: invalid multibulk length"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.raw(t)
			r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)) + cmd("SET", k+"before", "1") + tt.send + cmd("SET", k+"after", "1"))
			r.want("+OK")
			r.want("+OK")
			r.want(tt.want)
			r.closed()
			if got := e.stored(t, k); got != "" {
				t.Errorf("oversized command stored %d bytes, want nothing", len(got))
			}
			if got := e.stored(t, k+"after"); got != "" {
				t.Errorf("command after the protocol error ran: got %q, want nothing", got)
			}
		})
	}
}

// TestPipelineIndependent: in one pipelined batch, a refused or failing
// command does not abort the others (as in Redis), and is not applied.
func TestPipelineIndependent(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("pipe")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:"
	r := e.raw(t)
	r.send(cmd("AUTH", f, strconv.FormatUint(tok, 10)) + cmd("SET", k+"s", "v") +
		cmd("SET", k+"a", "1") + cmd("LPUSH", k+"s", "x") + cmd("SET", "untagged", "1") + cmd("EVAL", "return 1", "0") + cmd("INCR", k+"a") + cmd("GET", k+"a"))
	for _, want := range []string{"+OK", "+OK", "+OK", "-WRONGTYPE ", "-INVALID_REQUEST ", "-COMMAND_NOT_ALLOWED ", ":2", "$1"} {
		r.want(want)
	}
	r.want("2")
	if got := e.stored(t, k+"s"); got != "v" {
		t.Errorf("string after a failed LPUSH: got %q, want v", got)
	}
	// MULTI is all or nothing: a failure or a refusal aborts all of it.
	r.send(cmd("MULTI") + cmd("SET", k+"m1", "1") + cmd("LPUSH", k+"s", "x") + cmd("EXEC") +
		cmd("MULTI") + cmd("SET", k+"m2", "1") + cmd("EVAL", "return 1", "0") + cmd("EXEC") +
		cmd("MULTI") + cmd("SET", k+"m3", "1") + cmd("DISCARD") + cmd("EXEC"))
	for _, want := range []string{"+OK", "+QUEUED", "+QUEUED", "-EXECABORT ", "+OK", "+QUEUED", "+QUEUED", "-EXECABORT ", "+OK", "+QUEUED", "+OK", "-ERR EXEC without MULTI"} {
		r.want(want)
	}
	for _, m := range []string{"m1", "m2", "m3"} {
		if got := e.stored(t, k+m); got != "" {
			t.Errorf("%s: got %q stored, want nothing", m, got)
		}
	}
}

// TestPrincipal: over TLS, the client certificate names the principal the
// policy decides on (action redis.write); without a certificate the
// caller is refused when authentication is required.
func TestPrincipal(t *testing.T) {
	ca := authtest.NewCA(t, "resp")
	srvCert := ca.Localhost(t, "server")
	writer := ca.Issue(t, "writer", authtest.Leaf{URIs: []string{"spiffe://t/writer"}, Client: true})
	other := ca.Issue(t, "other", authtest.Leaf{URIs: []string{"spiffe://t/other"}, Client: true})
	p, err := policy.Parse([]byte(`rules:
  - name: writers
    principals: ["spiffe://t/writer"]
    fences: ["tls*"]
    actions: [redis.write]
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, resp.Config{TLS: &tls.Config{
		Certificates: []tls.Certificate{srvCert.TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}}, proxy.Options{Policy: p, AuthRequired: true})
	f := unique("tls")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:k"
	ctx := t.Context()
	for _, tt := range []struct {
		name string
		cert *authtest.Issued
		want string
	}{
		{"writer", writer, ""},
		{"other", other, "NOT_AUTHORIZED fencegate: "},
		{"no certificate", nil, "UNAUTHENTICATED fencegate: "},
	} {
		tc := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
		if tt.cert != nil {
			tc.Certificates = []tls.Certificate{tt.cert.TLS}
		}
		c := goredis.NewClient(&goredis.Options{Addr: e.addr, Username: f, Password: strconv.FormatUint(tok, 10), TLSConfig: tc, MaxRetries: -1})
		err := c.Set(ctx, k+tt.name, "v", 0).Err()
		c.Close()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want %q...", tt.name, err, tt.want)
		}
		stored := e.stored(t, k+tt.name) != ""
		if stored != (tt.want == "") {
			t.Errorf("%s: stored %v, want %v", tt.name, stored, tt.want == "")
		}
	}
	// A plain-text client gets nothing through a TLS listener.
	r := e.raw(t)
	r.send(cmd("PING"))
	if l, err := r.br.ReadString('\n'); err == nil && strings.HasPrefix(l, "+PONG") {
		t.Errorf("plain-text PING through the TLS listener: got %q, want the handshake to fail", l)
	}
}

// TestAttackConnections: connections beyond MaxConnections are refused
// with Redis's error and closed; a freed place is taken again.
func TestAttackConnections(t *testing.T) {
	e := newEnv(t, resp.Config{MaxConnections: 2})
	a, b := e.raw(t), e.raw(t)
	for _, r := range []*raw{a, b} {
		r.send(cmd("PING"))
		r.want("+PONG")
	}
	over := e.raw(t)
	over.want("-ERR max number of clients reached")
	over.closed()
	if open, refused := e.srv.Connections(); open != 2 || refused != 1 {
		t.Errorf("Connections: got %d open, %d refused; want 2, 1", open, refused)
	}
	a.c.Close()
	// The server sees a's close when it next reads; wait for the place.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := e.raw(t)
		c.send(cmd("PING"))
		if l, err := c.br.ReadString('\n'); err == nil && strings.HasPrefix(l, "+PONG") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted after one of the two closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttackConnectionsReleased: connections that end every way a client
// can end one (closed at once, a protocol error, QUIT, a refused AUTH)
// give their place back: with MaxConnections 2, nothing stays counted after
// each of forty of them, and two clients are served after them.
func TestAttackConnectionsReleased(t *testing.T) {
	e := newEnv(t, resp.Config{MaxConnections: 2})
	for i := range 40 {
		r := e.raw(t)
		switch i % 4 {
		case 1:
			r.send("*1\r\n$-5\r\n") // a protocol error closes the connection
			r.want("-ERR Protocol error")
		case 2:
			r.send(cmd("QUIT"))
			r.want("+OK")
		case 3:
			r.send(cmd("AUTH", "no-such-fence", "abc"))
			r.want("-")
		}
		r.c.Close()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			open, _ := e.srv.Connections()
			if open == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("connection %d: %d still counted after the client left", i, open)
			}
		}
	}
	for range 2 {
		r := e.raw(t)
		r.send(cmd("PING"))
		r.want("+PONG")
	}
}
