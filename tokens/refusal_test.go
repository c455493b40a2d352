package tokens_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// reasons is API.md's refusal table: each reason's wire value, metric label
// and sentinel.
var reasons = []struct {
	reason   tokens.Reason
	wire     string
	label    string
	sentinel error
}{
	{tokens.ReasonMissingToken, "MISSING_TOKEN", "missing_token", tokens.ErrMissing},
	{tokens.ReasonInvalidToken, "INVALID_TOKEN", "invalid_token", tokens.ErrInvalid},
	{tokens.ReasonInvalidRequest, "INVALID_REQUEST", "invalid_request", tokens.ErrInvalidRequest},
	{tokens.ReasonStaleToken, "STALE_TOKEN", "stale_token", tokens.ErrStale},
	{tokens.ReasonTermEnded, "TERM_ENDED", "term_ended", tokens.ErrTermEnded},
	{tokens.ReasonUnknownTerm, "UNKNOWN_TERM", "unknown_term", tokens.ErrUnknownTerm},
	{tokens.ReasonStatementFailed, "STATEMENT_FAILED", "statement_failed", tokens.ErrStatementFailed},
	{tokens.ReasonCommandNotAllowed, "COMMAND_NOT_ALLOWED", "command_not_allowed", tokens.ErrCommandNotAllowed},
	{tokens.ReasonBackendUnavailable, "BACKEND_UNAVAILABLE", "backend_unavailable", tokens.ErrBackendUnavailable},
	{tokens.ReasonEtcdUnavailable, "ETCD_UNAVAILABLE", "etcd_unavailable", tokens.ErrEtcdUnavailable},
	{tokens.ReasonOverloaded, "OVERLOADED", "overloaded", tokens.ErrOverloaded},
	{tokens.ReasonUnauthenticated, "UNAUTHENTICATED", "unauthenticated", tokens.ErrUnauthenticated},
	{tokens.ReasonNotAuthorized, "NOT_AUTHORIZED", "not_authorized", tokens.ErrNotAuthorized},
}

func TestReasonWireValueAndLabel(t *testing.T) {
	for _, tc := range reasons {
		if got := string(tc.reason); got != tc.wire {
			t.Errorf("reason: got %q, want %q", got, tc.wire)
		}
		if got := tc.reason.Label(); got != tc.label {
			t.Errorf("%s.Label(): got %q, want %q", tc.reason, got, tc.label)
		}
	}
}

func TestRefusalErrorIsAs(t *testing.T) {
	for _, tc := range reasons {
		t.Run(tc.wire, func(t *testing.T) {
			ref := tokens.Refuse(tc.reason, "jobs", 42, "token %d below %d", 42, 43)
			wrapped := fmt.Errorf("exec: %w", ref)

			for _, err := range []error{ref, wrapped} {
				if !errors.Is(err, tc.sentinel) {
					t.Errorf("errors.Is(%v, %v): got false, want true", err, tc.sentinel)
				}
				for _, other := range reasons {
					if other.reason != tc.reason && errors.Is(err, other.sentinel) {
						t.Errorf("errors.Is(%v, %v): got true, want false", err, other.sentinel)
					}
				}

				var got *tokens.RefusalError
				if !errors.As(err, &got) {
					t.Fatalf("errors.As(%v, *RefusalError): got false, want true", err)
				}
				if got != ref {
					t.Errorf("errors.As: got %p, want %p", got, ref)
				}
				r, ok := tokens.AsRefusal(err)
				if !ok || r != ref {
					t.Errorf("AsRefusal(%v): got %p, %v, want %p, true", err, r, ok, ref)
				}
			}

			if ref.Reason != tc.reason || ref.Fence != "jobs" || ref.Token != 42 {
				t.Errorf("Refuse: got reason %s fence %q token %d, want %s %q 42", ref.Reason, ref.Fence, ref.Token, tc.reason, "jobs")
			}
			if want := "token 42 below 43"; ref.Msg != want {
				t.Errorf("Refuse: got Msg %q, want %q", ref.Msg, want)
			}
		})
	}
}

func TestSentinelsAreDistinct(t *testing.T) {
	for i, a := range reasons {
		for j, b := range reasons {
			if i != j && errors.Is(a.sentinel, b.sentinel) {
				t.Errorf("sentinel of %s matches sentinel of %s", a.reason, b.reason)
			}
		}
		if !strings.HasPrefix(a.sentinel.Error(), "tokens: ") {
			t.Errorf("sentinel of %s: got %q, want the %q prefix", a.reason, a.sentinel, "tokens: ")
		}
	}
}

func TestRefusalErrorUnknownReason(t *testing.T) {
	err := &tokens.RefusalError{Reason: "BOGUS", Fence: "jobs", Token: 1}
	for _, tc := range reasons {
		if errors.Is(err, tc.sentinel) {
			t.Errorf("errors.Is(BOGUS refusal, %v): got true, want false", tc.sentinel)
		}
	}
}

func TestRefusalErrorUnwrap(t *testing.T) {
	ref := &tokens.RefusalError{
		Reason: tokens.ReasonBackendUnavailable,
		Fence:  "jobs",
		Token:  7,
		Err:    fmt.Errorf("dial: %w", context.DeadlineExceeded),
	}
	err := fmt.Errorf("exec: %w", ref)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded): got false, want true", err)
	}
	if !errors.Is(err, tokens.ErrBackendUnavailable) {
		t.Errorf("errors.Is(%v, ErrBackendUnavailable): got false, want true", err)
	}
	if got := ref.Unwrap(); !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("Unwrap: got %v, want %v", got, ref.Err)
	}
}

func TestRefusalErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *tokens.RefusalError
		want string
	}{
		{
			name: "reason only",
			err:  &tokens.RefusalError{Reason: tokens.ReasonMissingToken},
			want: "fencegate: MISSING_TOKEN",
		},
		{
			name: "with message",
			err:  tokens.Refuse(tokens.ReasonStaleToken, "jobs", 41, "token %d below high-water %d", 41, 42),
			want: "fencegate: STALE_TOKEN: token 41 below high-water 42",
		},
		{
			name: "with cause",
			err:  &tokens.RefusalError{Reason: tokens.ReasonEtcdUnavailable, Err: errors.New("deadline")},
			want: "fencegate: ETCD_UNAVAILABLE: deadline",
		},
		{
			name: "with message and cause",
			err:  &tokens.RefusalError{Reason: tokens.ReasonStatementFailed, Msg: "statement 2", Err: errors.New("syntax error")},
			want: "fencegate: STATEMENT_FAILED: statement 2: syntax error",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error(): got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAsRefusalWithoutRefusal(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), fmt.Errorf("wrapped: %w", tokens.ErrStale)} {
		if r, ok := tokens.AsRefusal(err); ok || r != nil {
			t.Errorf("AsRefusal(%v): got %v, %v, want nil, false", err, r, ok)
		}
	}
}
