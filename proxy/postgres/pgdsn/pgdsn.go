package pgdsn

import (
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ParseError is err, returned by pgx.ParseConfig, pgxpool.ParseConfig or
// pgconn.ParseConfig, as the reason the connection string did not parse,
// without the string or any piece of it. Other errors are returned as
// they are.
func ParseError(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err
	}
	// The message and the cause are unexported; a copy without the
	// string says them alone.
	bare := *pe
	bare.ConnString = ""
	reason := strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
	// net/url's error repeats the whole URL ("parse \"postgres://...\":
	// ..."): its cause alone.
	var ue *url.Error
	if errors.As(pe, &ue) {
		reason = strings.Replace(reason, ue.Error(), ue.Err.Error(), 1)
	}
	return &Error{Reason: scrub(reason)}
}

// quoted and valued match what the reasons repeat of the string itself
// (a keyword read up to a space, a setting's value, a URL's host): in a
// string that did not parse, any of them may be a piece of a password.
var (
	quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	valued = regexp.MustCompile(`(value|service): [^\s)]+`)
)

func scrub(reason string) string {
	reason = quoted.ReplaceAllStringFunc(reason, func(q string) string {
		if q == `"="` { // missing "=" after ...
			return q
		}
		return `"…"`
	})
	return valued.ReplaceAllString(reason, `$1: …`)
}

// Error is a connection string that did not parse; it never holds the
// string.
type Error struct {
	Reason string // pgx's, without the string
}

func (e *Error) Error() string {
	return "cannot parse the connection string (not shown: it may hold a password): " + e.Reason
}
