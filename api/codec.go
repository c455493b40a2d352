package api

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/tokens"
)

// requestCodec is grpc-go's protobuf codec, except that a Gateway request
// that does not parse (truncated, a string field not in UTF-8) reaches
// its handler, to be refused INVALID_REQUEST through the pipeline like
// any write that cannot be read. grpc-go answers a codec's error itself,
// with INTERNAL, before any handler or interceptor runs.
//
// What was decoded before the error stays in the message (its fence, for
// the authorization and the audit record); the error is put in its
// unknown fields as a field numbered 0, which no successful parse
// yields: a client cannot send it.
type requestCodec struct{ encoding.CodecV2 }

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	// Only the messages whose handlers look (unreadable); any other
	// keeps grpc-go's answer.
	switch m := v.(type) {
	case *fencegatev1.ExecRequest, *fencegatev1.RedisRequest, *fencegatev1.GetFenceRequest,
		*fencegatev1.ListFencesRequest, *fencegatev1.ResetFenceRequest:
		pm := m.(proto.Message).ProtoReflect()
		pm.SetUnknown(protowire.AppendString([]byte{unreadableTag}, err.Error()))
		return nil
	}
	return err
}

// unreadableTag is the tag of requestCodec's mark: field 0, bytes.
const unreadableTag = byte(protowire.BytesType)

// unreadable returns the refusal of a request requestCodec could not
// read, or nil.
func unreadable(m proto.Message, fence string) *tokens.RefusalError {
	b := m.ProtoReflect().GetUnknown()
	if len(b) == 0 || b[0] != unreadableTag {
		return nil
	}
	why, n := protowire.ConsumeBytes(b[1:])
	if n < 0 {
		return nil
	}
	return tokens.Refuse(tokens.ReasonInvalidRequest, fence, 0, "cannot read the request message: %s", why)
}

// newRequestCodec returns the codec of ServerOptions.
func newRequestCodec() encoding.CodecV2 {
	return requestCodec{encoding.GetCodecV2(grpcproto.Name)}
}
