package api

import (
	"net/http"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	"github.com/fencegate/fencegate/tokens"
)

// TestStatusTable is API.md's refusal tables: each reason's gRPC code and,
// through grpc-gateway's mapping, HTTP status.
func TestStatusTable(t *testing.T) {
	tests := []struct {
		reason tokens.Reason
		code   codes.Code
		http   int
	}{
		{tokens.ReasonMissingToken, codes.InvalidArgument, http.StatusBadRequest},
		{tokens.ReasonInvalidToken, codes.InvalidArgument, http.StatusBadRequest},
		{tokens.ReasonInvalidRequest, codes.InvalidArgument, http.StatusBadRequest},
		{tokens.ReasonStaleToken, codes.Aborted, http.StatusConflict},
		{tokens.ReasonTermEnded, codes.Aborted, http.StatusConflict},
		{tokens.ReasonUnknownTerm, codes.FailedPrecondition, http.StatusBadRequest},
		{tokens.ReasonStatementFailed, codes.FailedPrecondition, http.StatusBadRequest},
		{tokens.ReasonCommandNotAllowed, codes.PermissionDenied, http.StatusForbidden},
		{tokens.ReasonBackendUnavailable, codes.Unavailable, http.StatusServiceUnavailable},
		{tokens.ReasonEtcdUnavailable, codes.Unavailable, http.StatusServiceUnavailable},
		{tokens.ReasonOverloaded, codes.ResourceExhausted, http.StatusTooManyRequests},
		{tokens.ReasonUnauthenticated, codes.Unauthenticated, http.StatusUnauthorized},
		{tokens.ReasonNotAuthorized, codes.PermissionDenied, http.StatusForbidden},
	}
	for _, tt := range tests {
		st := refusalStatus(tokens.Refuse(tt.reason, "jobs", 7, "x"))
		if st.Code() != tt.code {
			t.Errorf("%s: got gRPC %v, want %v", tt.reason, st.Code(), tt.code)
		}
		if got := runtime.HTTPStatusFromCode(st.Code()); got != tt.http {
			t.Errorf("%s: got HTTP %d, want %d", tt.reason, got, tt.http)
		}
	}
	if len(codeOf) != len(tests) {
		t.Errorf("codeOf: got %d reasons, want the %d of API.md", len(codeOf), len(tests))
	}
}
