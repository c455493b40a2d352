// Package jsonbody decodes fencegate's HTTP/JSON request bodies for
// grpc-gateway.
//
// It guarantees that every integer in an accepted body reaches the request
// message exactly. Params and Redis arguments are google.protobuf.Value,
// whose numbers are IEEE doubles: a JSON integer beyond ±(2^53-1) would be
// rounded (12345678901234567 becomes 12345678901234568) and written as if
// the client had sent it. Such a body is refused, naming the number's place
// (e.g. statements[0].params[1]); send the value as a string, which is kept
// as it is. Numbers out of a double's range (1e400) are refused too. Other
// non-integral numbers are doubles, as JSON has them.
//
// It does not check what the body means: protojson does that, and the
// pipeline after it.
package jsonbody

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
)

// Codec is runtime.JSONPb with a cheaper request decoder that also refuses
// inexact integers. The body (bounded by the caller, e.g. with
// http.MaxBytesReader) is read once, its numbers checked, and handed to
// protojson, where JSONPb first scans it with encoding/json into a
// json.RawMessage; that scan was a tenth of fencegate's CPU per HTTP write.
// One more difference: text after the JSON object is refused, not ignored.
type Codec struct{ *runtime.JSONPb }

// NewDecoder returns a decoder of one JSON request body from r. A body of
// PathFenced that names another fence than its path is refused.
func (c Codec) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		m, ok := v.(proto.Message)
		if !ok {
			return c.JSONPb.NewDecoder(r).Decode(v)
		}
		body, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if err := c.Decode(body, m); err != nil {
			return bodyError(err)
		}
		if pf, ok := r.(*pathFenced); ok {
			if f, ok := m.(interface{ GetFence() string }); ok && f.GetFence() != "" && f.GetFence() != pf.fence {
				return fmt.Errorf("the body names fence %q, the path %q: send the fence in the path only", clip(f.GetFence()), pf.fence)
			}
		}
		return nil
	})
}

// bodyError says err is the request body's: protojson's errors name the
// library ("proto: unexpected EOF", with a space that is sometimes a
// no-break space), not what the caller sent.
func bodyError(err error) error {
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "proto:")
	if !ok {
		return err
	}
	return fmt.Errorf("request body is not a valid request: %s", strings.TrimLeft(rest, " \u00a0"))
}

// PathFenced is the body of a request whose path names fence. grpc-gateway
// decodes the body, then sets the fence from the path over whatever the
// body said: a body naming another fence would be run as the path's.
// Codec refuses it instead.
func PathFenced(body io.ReadCloser, fence string) io.ReadCloser {
	return &pathFenced{ReadCloser: body, fence: fence}
}

type pathFenced struct {
	io.ReadCloser
	fence string
}

// clip bounds a client's string quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Decode decodes body into m. An empty body (only white space) is io.EOF,
// which grpc-gateway takes as a request with no fields set.
func (c Codec) Decode(body []byte, m proto.Message) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return io.EOF
	}
	if err := CheckNumbers(body); err != nil {
		return err
	}
	return c.UnmarshalOptions.Unmarshal(body, m)
}
