package api

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/tokens"
)

// Domain is the ErrorInfo domain of every fencegate refusal.
const Domain = "fencegate"

// codeOf is the one table mapping refusal reasons to gRPC codes. HTTP status
// follows from the code through grpc-gateway's standard mapping, which gives
// exactly API.md's column (INVALID_ARGUMENT and FAILED_PRECONDITION 400,
// ABORTED 409, PERMISSION_DENIED 403, RESOURCE_EXHAUSTED 429, UNAVAILABLE
// 503).
var codeOf = map[tokens.Reason]codes.Code{
	tokens.ReasonMissingToken:       codes.InvalidArgument,
	tokens.ReasonInvalidToken:       codes.InvalidArgument,
	tokens.ReasonInvalidRequest:     codes.InvalidArgument,
	tokens.ReasonStaleToken:         codes.Aborted,
	tokens.ReasonTermEnded:          codes.Aborted,
	tokens.ReasonUnknownTerm:        codes.FailedPrecondition,
	tokens.ReasonStatementFailed:    codes.FailedPrecondition,
	tokens.ReasonCommandNotAllowed:  codes.PermissionDenied,
	tokens.ReasonBackendUnavailable: codes.Unavailable,
	tokens.ReasonEtcdUnavailable:    codes.Unavailable,
	tokens.ReasonOverloaded:         codes.ResourceExhausted,
	tokens.ReasonUnauthenticated:    codes.Unauthenticated,
	tokens.ReasonNotAuthorized:      codes.PermissionDenied,
}

// statusError turns an error from the pipeline into a gRPC status error.
func statusError(err error) error {
	if err == nil {
		return nil
	}
	if r, ok := tokens.AsRefusal(err); ok {
		return refusalStatus(r).Err()
	}
	switch {
	case errors.Is(err, proxy.ErrNotConfigured):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func refusalStatus(r *tokens.RefusalError) *status.Status {
	code, ok := codeOf[r.Reason]
	if !ok {
		code = codes.Internal
	}
	md := make(map[string]string, len(r.Metadata)+4)
	for k, v := range r.Metadata {
		md[k] = v
	}
	if r.Fence != "" {
		md["fence"] = r.Fence
	}
	if r.Token != 0 {
		md["token"] = strconv.FormatUint(uint64(r.Token), 10)
	}
	if r.HighWater != 0 {
		md["highWater"] = strconv.FormatUint(uint64(r.HighWater), 10)
	}
	if r.Term != 0 {
		md["term"] = strconv.FormatUint(uint64(r.Term), 10)
	}
	// A proto3 string must be UTF-8, or WithDetails fails and the status
	// would go without its reason; a fence name sent over HTTP may not be.
	for k, v := range md {
		if !utf8.ValidString(v) {
			md[k] = strings.ToValidUTF8(v, "\uFFFD")
		}
	}
	msg := r.Error()
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{
		Reason:   string(r.Reason),
		Domain:   Domain,
		Metadata: md,
	})
	if err != nil {
		return status.New(code, msg)
	}
	return st
}

// hasErrorInfo says whether st came from a refusal (refusalStatus).
func hasErrorInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return true
		}
	}
	return false
}
