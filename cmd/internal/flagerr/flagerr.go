// Package flagerr turns the errors of a flag.FlagSet's Parse into one line
// an operator can act on: an unknown flag with the flag it was likely
// meant to be, a bad value with the form the flag wants.
package flagerr

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/suggest"
)

// Explain rewrites err, returned by fs.Parse, as one line naming flags
// the way the commands' help and errors do (--name). Errors it does not
// know are returned as they are.
func Explain(err error, fs *flag.FlagSet) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return "unknown flag --" + name + suggest.Hint(name, names, "--%s")
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag --" + name + " needs a value"
	}
	// invalid value "x" for flag -name: reason
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		if i := strings.Index(rest, " for flag -"); i >= 0 {
			value := rest[:i]
			name, reason, _ := strings.Cut(rest[i+len(" for flag -"):], ": ")
			if f := fs.Lookup(name); f != nil {
				reason = Reason(f, reason)
			}
			return fmt.Sprintf("--%s=%s: %s", name, value, reason)
		}
	}
	// invalid boolean value "x" for -name: reason
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		if i := strings.Index(rest, " for -"); i >= 0 {
			name, _, _ := strings.Cut(rest[i+len(" for -"):], ": ")
			return fmt.Sprintf("--%s=%s: want true or false", name, rest[:i])
		}
	}
	return msg
}

// Reason is what flag f wants, when reason, the error of its Value's Set,
// is the flag package's bare "parse error": a duration's form, or a
// number.
func Reason(f *flag.Flag, reason string) string {
	g, ok := f.Value.(flag.Getter)
	if !ok || (reason != "parse error" && reason != "value out of range") {
		return reason
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 500ms, 5s or 1m30s"
	case int, int64:
		return "want an integer"
	case uint, uint64:
		return "want an integer from 0"
	case float64:
		return "want a number"
	}
	return reason
}
