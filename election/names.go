package election

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the etcd key prefix elections live under when none is
// configured: election <name> is held under "<prefix>/<name>/".
const DefaultPrefix = "/fencegate/elections"

// ErrInvalidName reports an election name that cannot be used: empty, or
// containing '/'.
var ErrInvalidName = errors.New("election: invalid election name")

// ErrInvalidPrefix reports an election prefix that cannot be used: empty or
// ending in '/'.
var ErrInvalidPrefix = errors.New("election: invalid election prefix")

// ValidateName reports whether name can name an election: it must be
// non-empty and contain no '/'. The error matches ErrInvalidName.
func ValidateName(name string) error {
	if name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

func validatePrefix(prefix string) error {
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("%w: %q", ErrInvalidPrefix, prefix)
	}
	return nil
}

// electionKeyPrefix returns the key prefix of the candidates of election
// name: "<prefix>/<name>/".
func electionKeyPrefix(prefix, name string) string { return prefix + "/" + name + "/" }

// splitKey returns the election a key under "<prefix>/" belongs to, or false
// when the key does not fit the layout "<prefix>/<name>/<anything>".
func splitKey(root, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, root)
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		return "", false
	}
	return name, true
}

// ValidFenceName reports whether name is a usable fence name: 1 to maxLen
// bytes of ASCII letters, digits, '.', '_' and '-', starting with a letter
// or digit. The same name is an etcd path segment and a Redis hash tag, so
// '/', '{' and '}' are out.
func ValidFenceName(name string, maxLen int) bool {
	if name == "" || len(name) > maxLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}
