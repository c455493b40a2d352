package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
)

// TestRedTeam22RESPCrossProtocolHTTP: attack — HTTP-to-RESP cross-protocol
// request forgery against the RESP listener as `fencegate dev` serves it
// (127.0.0.1:7379, plain TCP, no client identity). A web page the
// developer opens runs fetch("http://127.0.0.1:7379/", {method: "POST",
// mode: "no-cors", body: "AUTH <fence> <token>\r\nSET {<fence>}:k pwned\r\n"}):
// the browser connects and sends an HTTP request whose request line and
// headers the listener reads as inline commands (refused one by one) and
// whose body as two more, which it runs. On a monotonic fence any token
// at or above the mark is taken, so the page needs to know nothing:
// token 2^62 both writes the key and becomes the fence's term, fencing
// out the real leader (STALE_TOKEN). What happened: the connection stayed
// open through "POST / HTTP/1.1" and "Host: …", AUTH answered +OK and
// SET wrote. What should happen: what Redis does since 3.2.7 (and what a
// drop-in must keep): a first line "POST" or a "Host:" line is taken as a
// cross-protocol attack, the connection is closed before anything after
// it runs, and a line is logged. Severity: high — any web page writes
// through fencegate as a fenced writer, and fences out the leader.
func TestRedTeam22RESPCrossProtocolHTTP(t *testing.T) {
	ctx := context.WithoutCancel(t.Context())
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	w := runWatcher(t, newEtcdClient(t))
	terms, err := election.NewRouter(w, routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := redis.Open(ctx, redisAddr, redis.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{Terms: terms, Redis: rd})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := resp.New(gw, resp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = rs.Serve(lis) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(ctx, 5*time.Second)
		defer c()
		_ = rs.Shutdown(sctx)
		<-done
	})
	fence := "mono-" + fenceName(t)
	key := "{" + fence + "}:k"

	// Control: the real leader writes with its term 7.
	leader := dialRESP(t, lis.Addr().String())
	if got := leader.cmd("AUTH", fence, "7"); got != "+OK" {
		t.Fatalf("control: AUTH: %q", got)
	}
	if got := leader.cmd("SET", key, "leader"); got != "+OK" {
		t.Fatalf("control: SET: %q", got)
	}

	// The browser's request, byte for byte as Chrome sends a no-cors fetch.
	body := fmt.Sprintf("AUTH %s 4611686018427387904\r\nSET %s pwned\r\nQUIT\r\n", fence, key)
	req := "POST / HTTP/1.1\r\n" +
		"Host: " + lis.Addr().String() + "\r\n" +
		"Connection: keep-alive\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len(body)) +
		"Content-Type: text/plain;charset=UTF-8\r\n" +
		"Origin: https://attacker.example\r\n" +
		"Sec-Fetch-Site: cross-site\r\n" +
		"Sec-Fetch-Mode: no-cors\r\n" +
		"Sec-Fetch-Dest: empty\r\n" +
		"Referer: https://attacker.example/\r\n" +
		"Accept: */*\r\n" +
		"\r\n" + body
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(io.LimitReader(c, 64<<10))
	t.Logf("the listener answered the HTTP request with:\n%s", reply)

	adm := rdb(t)
	if v, _ := adm.Get(t.Context(), key).Result(); v != "leader" {
		t.Errorf("HOLE: a browser's cross-site HTTP POST to the RESP listener ran SET: %s is %q, want \"leader\"", key, v)
	}
	if got := leader.cmd("SET", key, "leader-again"); got != "+OK" {
		t.Errorf("HOLE: after the cross-site HTTP POST the real leader (term 7) is refused: %q", got)
	}
}

// respLine is a minimal RESP client: one command, the first line of its
// reply.
type respLine struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRESP(t *testing.T, addr string) *respLine {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &respLine{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *respLine) cmd(args ...string) string {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(r.c, b.String()); err != nil {
		r.t.Fatal(err)
	}
	line, err := r.br.ReadString('\n')
	if err != nil {
		r.t.Fatalf("RESP read: %v", err)
	}
	return strings.TrimRight(line, "\r\n")
}
