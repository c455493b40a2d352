package tokens

import (
	"errors"
	"fmt"
	"strings"
)

// Reason says why a write was refused. The values are the reasons of the
// wire contract (API.md); the API layer maps each to a gRPC code in one table.
type Reason string

// The reasons of API.md's refusal tables.
const (
	ReasonMissingToken       Reason = "MISSING_TOKEN"
	ReasonInvalidToken       Reason = "INVALID_TOKEN"
	ReasonInvalidRequest     Reason = "INVALID_REQUEST"
	ReasonStaleToken         Reason = "STALE_TOKEN"
	ReasonTermEnded          Reason = "TERM_ENDED"
	ReasonUnknownTerm        Reason = "UNKNOWN_TERM"
	ReasonStatementFailed    Reason = "STATEMENT_FAILED"
	ReasonCommandNotAllowed  Reason = "COMMAND_NOT_ALLOWED"
	ReasonBackendUnavailable Reason = "BACKEND_UNAVAILABLE"
	ReasonEtcdUnavailable    Reason = "ETCD_UNAVAILABLE"
	// ReasonOverloaded: fencegate refused the write to protect a dependency
	// (too many tokens to verify with etcd); retry with backoff.
	ReasonOverloaded Reason = "OVERLOADED"
	// ReasonUnauthenticated: authentication is configured and the caller
	// presented no valid client certificate or bearer token.
	ReasonUnauthenticated Reason = "UNAUTHENTICATED"
	// ReasonNotAuthorized: the policy does not allow the caller's principal
	// the action on the fence.
	ReasonNotAuthorized Reason = "NOT_AUTHORIZED"
)

// Label is the reason in lower snake case, as used in metric labels.
func (r Reason) Label() string { return strings.ToLower(string(r)) }

// Sentinels matching a *RefusalError of the same reason through errors.Is.
var (
	ErrStale              = errors.New("tokens: stale token")
	ErrTermEnded          = errors.New("tokens: term ended")
	ErrUnknownTerm        = errors.New("tokens: unknown term")
	ErrInvalidRequest     = errors.New("tokens: invalid request")
	ErrStatementFailed    = errors.New("tokens: statement failed")
	ErrCommandNotAllowed  = errors.New("tokens: command not allowed")
	ErrBackendUnavailable = errors.New("tokens: backend unavailable")
	ErrEtcdUnavailable    = errors.New("tokens: etcd unavailable")
	ErrOverloaded         = errors.New("tokens: overloaded")
	ErrUnauthenticated    = errors.New("tokens: unauthenticated")
	ErrNotAuthorized      = errors.New("tokens: not authorized")
)

var sentinels = map[Reason]error{
	ReasonMissingToken:       ErrMissing,
	ReasonInvalidToken:       ErrInvalid,
	ReasonInvalidRequest:     ErrInvalidRequest,
	ReasonStaleToken:         ErrStale,
	ReasonTermEnded:          ErrTermEnded,
	ReasonUnknownTerm:        ErrUnknownTerm,
	ReasonStatementFailed:    ErrStatementFailed,
	ReasonCommandNotAllowed:  ErrCommandNotAllowed,
	ReasonBackendUnavailable: ErrBackendUnavailable,
	ReasonEtcdUnavailable:    ErrEtcdUnavailable,
	ReasonOverloaded:         ErrOverloaded,
	ReasonUnauthenticated:    ErrUnauthenticated,
	ReasonNotAuthorized:      ErrNotAuthorized,
}

// RefusalError is a refused write: nothing of it was applied, unless
// Metadata["outcome"] is "unknown" (a backend that stopped answering after the
// write was sent).
type RefusalError struct {
	Reason Reason
	Fence  string
	Token  Token
	// HighWater and Term are set where known (zero otherwise).
	HighWater Token
	Term      Token
	// Metadata holds details for the client: "sqlstate", "statement",
	// "outcome", ... It never holds fence, token, highWater or term.
	Metadata map[string]string
	// Msg is a one-line, human-readable explanation.
	Msg string
	// Err is the underlying error, if any.
	Err error
}

func (e *RefusalError) Error() string {
	var b strings.Builder
	b.WriteString("fencegate: ")
	b.WriteString(string(e.Reason))
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *RefusalError) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's reason.
func (e *RefusalError) Is(target error) bool { return sentinels[e.Reason] == target }

// Refuse builds a *RefusalError with a formatted message.
func Refuse(reason Reason, fence string, t Token, format string, args ...any) *RefusalError {
	return &RefusalError{Reason: reason, Fence: fence, Token: t, Msg: fmt.Sprintf(format, args...)}
}

// AsRefusal returns err's *RefusalError, if it has one.
func AsRefusal(err error) (*RefusalError, bool) {
	var r *RefusalError
	ok := errors.As(err, &r)
	return r, ok
}
