package tokens

import (
	"errors"
	"strconv"
)

// Header is the HTTP header carrying a write's fencing token.
const Header = "Fencing-Token"

// MetadataKey is the gRPC metadata key carrying a write's fencing token.
const MetadataKey = "fencing-token"

// Token is a fencing token: the term of the writer's leadership, which is the
// etcd create revision of its key in the election. Valid tokens are > 0.
type Token uint64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

var (
	// ErrMissing is returned by Parse for an empty token.
	ErrMissing = errors.New("tokens: missing fencing token")
	// ErrInvalid is returned by Parse for anything but a decimal uint64 > 0.
	ErrInvalid = errors.New("tokens: invalid fencing token")
)

// Parse parses a token as sent by a client: a decimal uint64 greater than 0,
// digits only, no sign, spaces or
// leading zeros, so every token has one spelling.
func Parse(s string) (Token, error) {
	if s == "" {
		return 0, ErrMissing
	}
	if len(s) > 20 || s[0] == '0' {
		return 0, ErrInvalid
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrInvalid
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, ErrInvalid
	}
	return Token(n), nil
}
