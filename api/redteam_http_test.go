package api_test

// Red-team tests of the HTTP/JSON and gRPC front door and the operations
// side (API.md; docs/SECURITY.md, "Threat model" and "Operations"): bad
// input gets a clear refusal and nothing is written; errors are one line
// and leak nothing; the audit log cannot be forged and records what
// happened; metrics stay bounded whatever callers send; the operations
// endpoints change nothing. Each test asserts the safe outcome; a failing
// test is a hole.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fencegate/fencegate/api"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/proxy/redis"
)

// rtReply is a raw HTTP answer: status, body, and the ErrorInfo reason
// and message when the body is a google.rpc.Status.
type rtReply struct {
	code    int
	body    string
	reason  string
	message string
}

// rtDo sends one request with the headers given (each value its own
// header line) and reads the whole answer. cl, when not 0, sets
// ContentLength (-1: chunked).
func rtDo(t *testing.T, method, url string, hdr [][2]string, body io.Reader, cl int64) rtReply {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range hdr {
		req.Header[kv[0]] = append(req.Header[kv[0]], kv[1])
	}
	if cl != 0 {
		req.ContentLength = cl
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return parseReply(resp.StatusCode, raw)
}

func parseReply(code int, raw []byte) rtReply {
	r := rtReply{code: code, body: string(raw)}
	var st struct {
		Message string `json:"message"`
		Details []struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if json.Unmarshal(raw, &st) == nil {
		r.message = st.Message
		for _, d := range st.Details {
			if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" {
				r.reason = d.Reason
			}
		}
	}
	return r
}

func jsonHdr(kv ...string) [][2]string {
	h := [][2]string{{"Content-Type", "application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, [2]string{kv[i], kv[i+1]})
	}
	return h
}

// TestRedTeamHTTPRedisBinaryReply: a Redis write whose reply holds bytes
// that are not UTF-8 (GETRANGE cutting "é" in two) is applied, and then the
// caller is told it failed: HTTP 500 / gRPC INTERNAL "proto: invalid UTF-8
// in string", no ErrorInfo, no "outcome: unknown". A client that retries
// applies it twice. The safe outcome: either the write is answered (200),
// or it is refused and nothing of it is written.
func TestRedTeamHTTPRedisBinaryReply(t *testing.T) {
	r := startReplica(t, true)
	rc := rdb(t)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	ctx := t.Context()
	kHTTP, kGRPC := "{"+fence+"}:http", "{"+fence+"}:grpc"

	got := redisHTTP(t, r, fence, l.token, fmt.Sprintf(`{"commands":[["SET",%q,"é"],["GETRANGE",%q,0,0]]}`, kHTTP, kHTTP))
	v, err := rc.Get(ctx, kHTTP).Result()
	if got.code != http.StatusOK && err == nil {
		t.Errorf("HOLE: HTTP answered %d %q (reason %q), yet %s = %q was written", got.code, got.body["message"], got.reason, kHTTP, v)
	}

	s := structpb.NewStringValue
	gctx := metadata.AppendToOutgoingContext(ctx, "fencing-token", fmt.Sprint(l.token))
	_, gerr := r.grpc.Redis(gctx, &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{
		{Values: []*structpb.Value{s("SET"), s(kGRPC), s("é")}},
		{Values: []*structpb.Value{s("GETRANGE"), s(kGRPC), s("0"), s("0")}},
	}})
	v, err = rc.Get(ctx, kGRPC).Result()
	if gerr != nil && err == nil {
		t.Errorf("HOLE: gRPC answered %v, yet %s = %q was written", gerr, kGRPC, v)
	}
}

// TestRedTeamHTTPTokenForms: every spelling of the token but the one
// decimal form is refused with a short one-line error, and nothing is
// written.
func TestRedTeamHTTPTokenForms(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	tok := fmt.Sprint(l.token)
	url := r.url + "/v1/fences/" + fence + "/sql"
	body := sqlBody(insert(table, "mallory", l.token))

	for _, tc := range []struct {
		name string
		hdr  [][2]string
	}{
		{"two different values", jsonHdr("Fencing-Token", tok, "Fencing-Token", fmt.Sprint(l.token+1))},
		{"same value twice", jsonHdr("Fencing-Token", tok, "Fencing-Token", tok)},
		{"header and Grpc-Metadata", jsonHdr("Fencing-Token", tok, "Grpc-Metadata-Fencing-Token", tok)},
		{"lower-case duplicate", jsonHdr("Fencing-Token", tok, "fencing-token", tok)},
		{"comma list", jsonHdr("Fencing-Token", tok+","+tok)},
		{"leading zero", jsonHdr("Fencing-Token", "0"+tok)},
		{"plus", jsonHdr("Fencing-Token", "+"+tok)},
		{"inner space", jsonHdr("Fencing-Token", tok+" 1")},
		{"fullwidth digits", jsonHdr("Fencing-Token", strings.Map(func(r rune) rune { return r - '0' + '０' }, tok))},
		{"arabic-indic digits", jsonHdr("Fencing-Token", strings.Map(func(r rune) rune { return r - '0' + '٠' }, tok))},
		{"2^64", jsonHdr("Fencing-Token", "18446744073709551616")},
		{"2^63 (negative as int64)", jsonHdr("Fencing-Token", "9223372036854775808")},
		{"2^64-1", jsonHdr("Fencing-Token", "18446744073709551615")},
		{"hex", jsonHdr("Fencing-Token", fmt.Sprintf("0x%x", l.token))},
		{"exponent", jsonHdr("Fencing-Token", tok+"e0")},
		{"obs-text", jsonHdr("Fencing-Token", tok+"\xff")},
		{"60 KiB", jsonHdr("Fencing-Token", strings.Repeat("9", 60<<10))},
		{"empty and valid", jsonHdr("Fencing-Token", "", "Fencing-Token", tok)},
		// grpc-gateway drops a header value that is not ASCII (logging
		// an ERROR line each time) and forwards the other.
		{"valid and non-ASCII", jsonHdr("Fencing-Token", tok, "Fencing-Token", fmt.Sprint(l.token+1)+"\xff")},
		{"non-ASCII and valid", jsonHdr("Fencing-Token", "ﬀ", "Fencing-Token", tok)},
		{"empty", jsonHdr("Fencing-Token", "")},
	} {
		got := rtDo(t, http.MethodPost, url, tc.hdr, strings.NewReader(body), 0)
		switch {
		case got.code == http.StatusOK:
			t.Errorf("HOLE: %s: got 200 %s", tc.name, got.body)
		case got.reason == "":
			t.Errorf("%s: got %d with no ErrorInfo reason: %.200s", tc.name, got.code, got.body)
		case strings.ContainsAny(got.message, "\r\n") || len(got.message) > 512:
			t.Errorf("%s: message is not one short line (%d bytes): %.200q", tc.name, len(got.message), got.message)
		}
	}
	// The token is not a body field.
	got := rtDo(t, http.MethodPost, url, jsonHdr(), strings.NewReader(`{"token":"`+tok+`","statements":[`+insert(table, "mallory", l.token)+`]}`), 0)
	if got.code != http.StatusBadRequest || got.reason != "INVALID_REQUEST" {
		t.Errorf("token in the body: got %d %s, want 400 INVALID_REQUEST", got.code, got.reason)
	}
	// gRPC: two metadata values, one of them the valid token.
	gctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", tok, "fencing-token", "1")
	_, err := r.grpc.Exec(gctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{
		Sql: "INSERT INTO " + table + "(worker, token) VALUES ('mallory', 1)",
	}}})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || errorReason(st) != "INVALID_TOKEN" {
		t.Errorf("gRPC two metadata values: got %v, want InvalidArgument INVALID_TOKEN", err)
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("HOLE: %d rows written by requests that should have been refused", n)
	}
}

// TestRedTeamHTTPBodies: malformed, oversized, ambiguous and hostile
// bodies are refused and write nothing.
func TestRedTeamHTTPBodies(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	rc := rdb(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	tok := fmt.Sprint(l.token)
	sqlURL := r.url + "/v1/fences/" + fence + "/sql"
	redisURL := r.url + "/v1/fences/" + fence + "/redis"
	ins := insert(table, "mallory", l.token)
	insP := func(p string) string {
		return fmt.Sprintf(`{"sql":"INSERT INTO %s(worker, token) VALUES ('mallory', $1)","params":[%s]}`, table, p)
	}
	key := "{" + fence + "}:k"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(sqlBody(ins)))
	_ = zw.Close()

	for _, tc := range []struct {
		name, url string
		hdr       [][2]string
		body      func() io.Reader
		cl        int64
	}{
		{"duplicate sql", sqlURL, nil, nil, 0},
		{"duplicate statements", sqlURL, nil, nil, 0},
		{"duplicate jsonb key", sqlURL, nil, nil, 0},
		{"unknown field", sqlURL, nil, nil, 0},
		{"camel/snake mix", sqlURL, nil, nil, 0},
		{"statements as object", sqlURL, nil, nil, 0},
		{"sql as number", sqlURL, nil, nil, 0},
		{"params as object", sqlURL, nil, nil, 0},
		{"deep nesting", sqlURL, nil, nil, 0},
		{"invalid UTF-8", sqlURL, nil, nil, 0},
		{"lone surrogate", sqlURL, nil, nil, 0},
		{"NUL in SQL", sqlURL, nil, nil, 0},
		{"NUL in param", sqlURL, nil, nil, 0},
		{"text after", sqlURL, nil, nil, 0},
		{"two objects", sqlURL, nil, nil, 0},
		{"2^53+1", sqlURL, nil, nil, 0},
		{"2^53+1 as fraction", sqlURL, nil, nil, 0},
		{"2^53+1 as exponent", sqlURL, nil, nil, 0},
		{"2^53+1 negative exponent", sqlURL, nil, nil, 0},
		{"2^53+1 nested in jsonb", sqlURL, nil, nil, 0},
		{"1e400", sqlURL, nil, nil, 0},
		{"leading zeros", sqlURL, nil, nil, 0},
		{"NaN", sqlURL, nil, nil, 0},
		{"gzip, not decompressed", sqlURL, jsonHdr("Fencing-Token", tok, "Content-Encoding", "gzip"), func() io.Reader { return bytes.NewReader(gz.Bytes()) }, 0},
		{"chunked over the limit", sqlURL, nil, func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"statements":[`+ins+`,{"sql":"SELECT 1 -- `), strings.NewReader(strings.Repeat("x", 200<<10)), strings.NewReader(`"}]}`))
		}, -1},
		{"Content-Length over the limit", sqlURL, nil, func() io.Reader { return strings.NewReader(sqlBody(ins)) }, 0},
		{"redis 2^53+1", redisURL, nil, nil, 0},
		{"redis bool", redisURL, nil, nil, 0},
		{"redis null", redisURL, nil, nil, 0},
		{"redis object", redisURL, nil, nil, 0},
		{"redis nested list", redisURL, nil, nil, 0},
		{"redis duplicate commands", redisURL, nil, nil, 0},
		{"redis commands as strings", redisURL, nil, nil, 0},
	} {
		bodies := map[string]string{
			"duplicate sql":             `{"statements":[{"sql":"SELECT 1","sql":` + jsonStr(strings.TrimSuffix(strings.TrimPrefix(ins, `{"sql":`), `}`)) + `}]}`,
			"duplicate statements":      `{"statements":[{"sql":"SELECT 1"}],"statements":[` + ins + `]}`,
			"duplicate jsonb key":       sqlBody(ins, `{"sql":"SELECT $1::jsonb","params":[{"a":1,"a":2}]}`),
			"unknown field":             `{"statements":[` + ins + `],"fencingToken":"` + tok + `"}`,
			"camel/snake mix":           `{"statements":[` + ins + `],"Statements":[]}`,
			"statements as object":      `{"statements":` + ins + `}`,
			"sql as number":             sqlBody(ins, `{"sql":1}`),
			"params as object":          sqlBody(fmt.Sprintf(`{"sql":"INSERT INTO %s(worker, token) VALUES ('mallory', 1)","params":{"a":1}}`, table)),
			"deep nesting":              sqlBody(ins, `{"sql":"SELECT $1::jsonb","params":[`+strings.Repeat("[", 30000)+strings.Repeat("]", 30000)+`]}`),
			"invalid UTF-8":             sqlBody(ins, "{\"sql\":\"SELECT '\xff'\"}"),
			"lone surrogate":            sqlBody(insP(`"\ud800"`)),
			"NUL in SQL":                sqlBody(fmt.Sprintf(`{"sql":"INSERT INTO %s(worker, token) VALUES ('mallory', 1)\u0000; SELECT 1"}`, table)),
			"NUL in param":              sqlBody(fmt.Sprintf(`{"sql":"INSERT INTO %s(worker, token) VALUES ($1, 1)","params":["mal\u0000lory"]}`, table)),
			"text after":                sqlBody(ins) + `x`,
			"two objects":               sqlBody(ins) + sqlBody(ins),
			"2^53+1":                    sqlBody(insP("9007199254740993")),
			"2^53+1 as fraction":        sqlBody(insP("9007199254740993.0")),
			"2^53+1 as exponent":        sqlBody(insP("9.007199254740993e15")),
			"2^53+1 negative exponent":  sqlBody(insP("900719925474099300e-2")),
			"2^53+1 nested in jsonb":    sqlBody(ins, `{"sql":"SELECT $1::jsonb","params":[{"a":[1,{"b":-9007199254740993}]}]}`),
			"1e400":                     sqlBody(insP("1e400")),
			"leading zeros":             sqlBody(insP("007")),
			"NaN":                       sqlBody(insP("NaN")),
			"redis 2^53+1":              fmt.Sprintf(`{"commands":[["SET",%q,9007199254740993]]}`, key),
			"redis bool":                fmt.Sprintf(`{"commands":[["SET",%q,"x"],["SET",%q,true]]}`, key, key),
			"redis null":                fmt.Sprintf(`{"commands":[["SET",%q,"x"],["SET",%q,null]]}`, key, key),
			"redis object":              fmt.Sprintf(`{"commands":[["SET",%q,"x"],["SET",%q,{"a":1}]]}`, key, key),
			"redis nested list":         fmt.Sprintf(`{"commands":[["SET",%q,["x"]]]}`, key),
			"redis duplicate commands":  fmt.Sprintf(`{"commands":[["SET",%q,"x"]],"commands":[["GET",%q]]}`, key, key),
			"redis commands as strings": fmt.Sprintf(`{"commands":["SET",%q,"x"]}`, key),
		}
		hdr := tc.hdr
		if hdr == nil {
			hdr = jsonHdr("Fencing-Token", tok)
		}
		var body io.Reader
		cl := tc.cl
		switch {
		case tc.body != nil:
			body = tc.body()
			if tc.name == "Content-Length over the limit" {
				cl = 1 << 30 // the body is short: a lie, refused before reading
			}
		default:
			b, ok := bodies[tc.name]
			if !ok {
				t.Fatalf("no body for %s", tc.name)
			}
			body = strings.NewReader(b)
		}
		if cl == 1<<30 {
			got := rtRaw(t, strings.TrimPrefix(r.url, "http://"), fmt.Sprintf(
				"POST /v1/fences/%s/sql HTTP/1.1\r\nHost: x\r\nFencing-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				fence, tok, cl, sqlBody(ins)))
			if got.code == http.StatusOK {
				t.Errorf("HOLE: %s: got 200", tc.name)
			}
			continue
		}
		got := rtDo(t, http.MethodPost, tc.url, hdr, body, cl)
		if got.code == http.StatusOK {
			t.Errorf("HOLE: %s: got 200 %.300s", tc.name, got.body)
		} else if got.code != http.StatusBadRequest || (got.reason != "INVALID_REQUEST" && got.reason != "STATEMENT_FAILED") {
			t.Errorf("%s: got %d %s %.200s, want 400 INVALID_REQUEST or STATEMENT_FAILED", tc.name, got.code, got.reason, got.body)
		}
	}

	// Content-Length shorter than the body: the rest is a second request
	// on the connection, which must not be run as a write either; and a
	// Content-Length longer than what arrives before the client closes.
	addr := strings.TrimPrefix(r.url, "http://")
	full := sqlBody(ins)
	got := rtRaw(t, addr, fmt.Sprintf("POST /v1/fences/%s/sql HTTP/1.1\r\nHost: x\r\nFencing-Token: %s\r\nContent-Length: %d\r\n\r\n%s",
		fence, tok, len(full)/2, full))
	if got.code == http.StatusOK {
		t.Errorf("HOLE: Content-Length short of the body: got 200")
	}
	got = rtRawHalfClose(t, addr, fmt.Sprintf("POST /v1/fences/%s/sql HTTP/1.1\r\nHost: x\r\nFencing-Token: %s\r\nContent-Length: %d\r\n\r\n%s",
		fence, tok, len(full)+100, full))
	if got.code == http.StatusOK {
		t.Errorf("HOLE: Content-Length beyond the body: got 200")
	}

	if n := count(t, c, table); n != 0 {
		t.Errorf("HOLE: %d rows written by refused requests", n)
	}
	if err := rc.Get(t.Context(), key).Err(); !errors.Is(err, goredis.Nil) {
		t.Errorf("HOLE: %s exists after refused requests (%v)", key, err)
	}
	if got := execHTTP(t, r, fence, l.token, insert(table, "leader", l.token)); got.code != 200 {
		t.Errorf("leader after the attempts: got %d %v, want 200", got.code, got.body)
	}
}

func jsonStr(s string) string {
	// s is already a JSON string literal (the "sql" value of insert).
	return s[:strings.Index(s, `","params"`)+1]
}

// rtRaw writes req on a new connection and reads the first answer.
func rtRaw(t *testing.T, addr, req string) rtReply {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return rtRead(t, conn)
}

// rtRawHalfClose writes req, closes the sending side and reads the answer.
func rtRawHalfClose(t *testing.T, addr, req string) rtReply {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	return rtRead(t, conn)
}

func rtRead(t *testing.T, conn net.Conn) rtReply {
	t.Helper()
	br := bufio.NewReader(conn)
	var last rtReply
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return last // connection closed: what was answered so far
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = parseReply(resp.StatusCode, raw)
		if last.code == http.StatusOK {
			return last
		}
	}
}

// TestRedTeamHTTPMethods: no other method, override header or content
// type turns into a write; the operations endpoints change nothing.
func TestRedTeamHTTPMethods(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	rc := rdb(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	tok := fmt.Sprint(l.token)
	key := "{" + fence + "}:k"
	sqlB := sqlBody(insert(table, "mallory", l.token))
	redisB := fmt.Sprintf(`{"commands":[["SET",%q,"mallory"]]}`, key)
	for _, path := range []string{"/v1/fences/" + fence + "/sql", "/v1/fences/" + fence + "/redis", "/v1/fences/" + fence + "/reset"} {
		b := sqlB
		if strings.HasSuffix(path, "/redis") {
			b = redisB
		}
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodPatch, http.MethodDelete, "TRACE", "CONNECT", "post"} {
			for _, ov := range []string{"", "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
				h := jsonHdr("Fencing-Token", tok)
				if ov != "" {
					h = append(h, [2]string{ov, http.MethodPost})
				}
				got := rtDo(t, m, r.url+path, h, strings.NewReader(b), 0)
				if got.code >= 200 && got.code < 300 {
					t.Errorf("HOLE: %s %s (override %q): got %d %.200s", m, path, ov, got.code, got.body)
				}
			}
		}
	}
	// The operations endpoints take no writes.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/openapi.json"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			got := rtDo(t, m, r.url+path, jsonHdr("Fencing-Token", tok), strings.NewReader(sqlB), 0)
			if got.code >= 200 && got.code < 300 {
				t.Errorf("%s %s: got %d, want it refused", m, path, got.code)
			}
		}
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("HOLE: %d rows written", n)
	}
	if err := rc.Get(t.Context(), key).Err(); !errors.Is(err, goredis.Nil) {
		t.Errorf("HOLE: %s written (%v)", key, err)
	}
	// Nothing of the backends' addresses or credentials on the open
	// endpoints.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/openapi.json"} {
		got := rtDo(t, http.MethodGet, r.url+path, nil, nil, 0)
		if strings.Contains(got.body, pgDSN) {
			t.Errorf("GET %s shows the DSN", path)
		}
	}
}

// TestRedTeamHTTPAuditHostile: fence names and tokens made to break the
// audit log's lines or forge fields are escaped; every decision is one
// line of JSON naming what was sent.
func TestRedTeamHTTPAuditHostile(t *testing.T) {
	alog, records := testAudit(t)
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), audit: alog})
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	tok := fmt.Sprint(l.token)

	forged := `{"time":"2000-01-01T00:00:00Z","outcome":"accepted","fence":"` + fence + `"}`
	names := []string{
		fence + "\n" + forged,
		fence + `","outcome":"accepted`,
		fence + "\r\u2028\u2029<>&\\",
		fence + "\x00\x1b[31m",
		fence + "\xff\xfe",
	}
	pct := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			fmt.Fprintf(&b, "%%%02X", s[i])
		}
		return b.String()
	}
	sent := 0
	for _, n := range names {
		for _, token := range []string{"", tok, `1","outcome":"accepted`} {
			got := rtDo(t, http.MethodPost, r.url+"/v1/fences/"+pct(n)+"/sql", jsonHdr("Fencing-Token", token), strings.NewReader(sqlBody(insert(table, "mallory", l.token))), 0)
			if got.code == http.StatusOK {
				t.Errorf("HOLE: fence %q token %q: got 200", n, token)
			}
			sent++
		}
	}
	// Over gRPC, the same names.
	for _, n := range names {
		if !isValidUTF8(n) {
			continue // not a proto3 string
		}
		gctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", tok)
		if _, err := r.grpc.Exec(gctx, &fencegatev1.ExecRequest{Fence: n, Statements: []*fencegatev1.Statement{{Sql: "SELECT 1"}}}); err == nil {
			t.Errorf("HOLE: gRPC fence %q accepted", n)
		}
		sent++
	}
	if got := execHTTP(t, r, fence, l.token, insert(table, "leader", l.token)); got.code != 200 {
		t.Fatalf("leader: got %d %v", got.code, got.body)
	}
	sent++
	lines, raw := records()
	if len(lines) != sent {
		t.Errorf("audit log: got %d lines for %d decisions:\n%s", len(lines), sent, raw)
	}
	accepted := 0
	for i, line := range lines {
		var rec map[string]any
		dec := json.NewDecoder(strings.NewReader(line))
		if err := dec.Decode(&rec); err != nil || dec.More() {
			t.Errorf("HOLE: audit line %d is not one JSON object (%v): %q", i, err, line)
			continue
		}
		if rec["outcome"] == "accepted" {
			accepted++
			if rec["fence"] != fence {
				t.Errorf("HOLE: accepted record for fence %q", rec["fence"])
			}
		}
		if tk, _ := rec["token"].(float64); tk != 0 && tk != float64(l.token) {
			t.Errorf("audit line %d: token %v, want 0 or %d", i, rec["token"], l.token)
		}
	}
	if accepted != 1 {
		t.Errorf("HOLE: %d records say accepted, want 1 (the leader's)", accepted)
	}
	if n := count(t, c, table); n != 1 {
		t.Errorf("HOLE: %d rows, want only the leader's", n)
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// TestRedTeamHTTPMetricsBounded: whatever names, tokens and bodies callers
// send, on every endpoint, the number of fencegate_* series stays bounded.
func TestRedTeamHTTPMetricsBounded(t *testing.T) {
	r := startReplica(t, true)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	if got := redisHTTP(t, r, fence, l.token, fmt.Sprintf(`{"commands":[["SET","{%s}:k","v"]]}`, fence)); got.code != 200 {
		t.Fatalf("leader: %d %v", got.code, got.body)
	}
	series := func() int {
		mfs, err := r.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	before := series()
	const names = 300
	for i := range names {
		name := fmt.Sprintf("%s-m%d", fence, i)
		switch i % 10 {
		case 0:
			rtDo(t, http.MethodGet, r.url+"/v1/fences/"+name, nil, nil, 0)
		case 1:
			rtDo(t, http.MethodGet, r.url+"/v1/fences/_"+name, nil, nil, 0)
		case 2:
			rtDo(t, http.MethodPost, r.url+"/v1/fences/"+name+"/reset", jsonHdr(), strings.NewReader(`{"highWater":"0"}`), 0)
		case 3:
			rtDo(t, http.MethodPost, r.url+"/v1/fences/_"+name+"/reset", jsonHdr(), strings.NewReader(`{"highWater":"0"}`), 0)
		case 4:
			rtDo(t, http.MethodPost, r.url+"/v1/fences/"+name+"/redis", jsonHdr("Fencing-Token", fmt.Sprintf("x%d", i)), strings.NewReader(`{"commands":[["GET","{x}:k"]]}`), 0)
		case 5:
			rtDo(t, http.MethodPost, r.url+"/v1/fences/"+name+"/redis", jsonHdr("Fencing-Token", "1"), strings.NewReader(fmt.Sprintf(`{"commands":[["CMD%d","{%s}:k"]]}`, i, name)), 0)
		case 6: // the known fence, a new refusal text each time
			rtDo(t, http.MethodPost, r.url+"/v1/fences/"+fence+"/redis", jsonHdr("Fencing-Token", fmt.Sprint(l.token)), strings.NewReader(fmt.Sprintf(`{"commands":[["CMD%d","{%s}:k"]]}`, i, fence)), 0)
		case 7:
			rtDo(t, http.MethodPost, r.url+"/v1/fences/"+fence+"/sql", jsonHdr("Fencing-Token", fmt.Sprint(l.token)), strings.NewReader(fmt.Sprintf(`{"statements":[{"sql":"SELECT %d/0"}]}`, i)), 0)
		case 8:
			gctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", fmt.Sprint(uint64(1)<<63+uint64(i)))
			_, _ = r.grpc.Exec(gctx, &fencegatev1.ExecRequest{Fence: name, Statements: []*fencegatev1.Statement{{Sql: "SELECT 1"}}})
		case 9:
			rtDo(t, http.MethodPost, r.url+"/v1/fences/"+name+"/sql?x="+name, jsonHdr("Fencing-Token", "1", "X-Fence", name), strings.NewReader(`{"statements":[{"sql":"SELECT 1"}]}`), 0)
		}
	}
	after := series()
	// A handful of new series are legitimate (new reasons under _other and
	// the fence; histogram buckets are one series per family member).
	if after-before > 40 {
		t.Errorf("HOLE: %d fencegate series after %d hostile requests, %d before", after, names, before)
	}
}

// rtGRPCServer serves a gateway over gRPC with the options serve uses
// (cmd/fencegate/serve.go: MaxRecvMsgSize twice --max-body-bytes, stream
// workers; nothing else bounds messages, streams or metadata).
func rtGRPCServer(t *testing.T, maxBody int) (fencegatev1.GatewayClient, *grpc.ClientConn, *election.Watcher) {
	t.Helper()
	return rtGRPCServerDSN(t, maxBody, pgDSN, nil)
}

func rtGRPCServerDSN(t *testing.T, maxBody int, dsn string, logs io.Writer) (fencegatev1.GatewayClient, *grpc.ClientConn, *election.Watcher) {
	t.Helper()
	cli := newEtcdClient(t)
	w, err := election.NewWatcher(cli, election.WatcherConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "watch synced", w.Synced)
	pg, err := postgres.Open(t.Context(), dsn, postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	rd, err := redis.Open(t.Context(), redisAddr, redis.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	lh := slog.DiscardHandler
	if logs != nil {
		lh = slog.NewTextHandler(logs, nil)
	}
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{
		Terms: w, Postgres: pg, Redis: rd,
		Logger: slog.New(lh), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(api.ServerOptions(maxBody)...)
	api.NewServer(gw, maxBody).Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return fencegatev1.NewGatewayClient(conn), conn, w
}

// TestRedTeamHTTPGRPCMetadataBounded: the HTTP port refuses headers over
// 64 KiB (MaxHeaderBytes); gRPC, as serve configures it, takes metadata of
// up to grpc-go's default 16 MiB on every stream, with no bound on
// concurrent streams: 256 times the memory per request. A request with
// 8 MiB of metadata must be refused.
func TestRedTeamHTTPGRPCMetadataBounded(t *testing.T) {
	gc, _, w := rtGRPCServer(t, 64<<10)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitFor(t, "term", func() bool { return w.Term(fence).Rev == l.token })
	s := structpb.NewStringValue
	ctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", fmt.Sprint(l.token), "x-junk", strings.Repeat("j", 8<<20))
	_, err := gc.Redis(ctx, &fencegatev1.RedisRequest{Fence: fence, Commands: []*structpb.ListValue{{Values: []*structpb.Value{s("GET"), s("{" + fence + "}:k")}}}})
	if err == nil {
		t.Errorf("HOLE: a request with 8 MiB of metadata was served")
	}
}

// TestRedTeamHTTPErrorsHideDSN: with a password in --postgres-dsn, no
// refusal (a failing statement, the connection killed under the write)
// and no log line shows it.
func TestRedTeamHTTPErrorsHideDSN(t *testing.T) {
	const secret = "rtS3cretPassw0rdXYZ"
	// The test server trusts local logins, so any password is taken.
	u, err := url.Parse(pgDSN)
	if err != nil || u.User == nil {
		t.Fatalf("DSN %q: want a URL with a user (%v)", pgDSN, err)
	}
	u.User = url.UserPassword(u.User.Username(), secret)
	dsn := u.String()
	logs := &syncBuffer{}
	gc, _, w := rtGRPCServerDSN(t, 64<<10, dsn, logs)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitFor(t, "term", func() bool { return w.Term(fence).Rev == l.token })
	ctx := metadata.AppendToOutgoingContext(t.Context(), "fencing-token", fmt.Sprint(l.token))
	for _, sql := range []string{"SELECT 1/0", "SELECT pg_terminate_backend(pg_backend_pid())", "SELECT current_setting('no.such')", "SELECT 1"} {
		_, err := gc.Exec(ctx, &fencegatev1.ExecRequest{Fence: fence, Statements: []*fencegatev1.Statement{{Sql: sql}}})
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("HOLE: %s: the refusal shows the DSN's password: %v", sql, err)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("HOLE: the log shows the DSN's password")
	}
}
