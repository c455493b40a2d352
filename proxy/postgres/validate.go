package postgres

import (
	"math"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/tokens"
)

// refusedKeywords are leading keywords of statements that would end or
// split the write's transaction, or change the pooled session beyond it.
var refusedKeywords = map[string]string{
	"BEGIN":      "transaction control",
	"START":      "transaction control",
	"COMMIT":     "transaction control",
	"END":        "transaction control",
	"ROLLBACK":   "transaction control",
	"ABORT":      "transaction control",
	"SAVEPOINT":  "transaction control",
	"RELEASE":    "transaction control",
	"PREPARE":    "transaction control (PREPARE TRANSACTION) or session state",
	"CALL":       "procedures may commit",
	"DO":         "DO blocks may commit",
	"VACUUM":     "cannot run inside a transaction",
	"RESET":      "session state",
	"DISCARD":    "session state",
	"DEALLOCATE": "session state",
	"EXECUTE":    "session state",
	"LISTEN":     "session state",
	"UNLISTEN":   "session state",
	"LOAD":       "session state",
	"DECLARE":    "cursors outlive the statement",
	"COPY":       "COPY is not a parameterised statement",
}

// validate checks a write before anything is sent. A refusal is an
// INVALID_REQUEST with the statement's 0-based index where one is at fault.
func (b *Backend) validate(fence string, t tokens.Token, stmts []Statement) *tokens.RefusalError {
	switch {
	case fence == "":
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "empty fence name")
	case t == 0 || t > math.MaxInt64:
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "fencing token %d out of range 1..%d", t, int64(math.MaxInt64))
	case len(stmts) == 0:
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "no statements")
	}
	if b.uncheckedSQL {
		return nil
	}
	for i, s := range stmts {
		if msg := checkStatement(s.SQL); msg != "" {
			r := tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "statement %d: %s", i, msg)
			r.Metadata = map[string]string{"statement": strconv.Itoa(i)}
			return r
		}
	}
	return nil
}

// checkStatement returns why sql is refused, or "".
func checkStatement(sql string) string {
	kw, rest := leadingKeyword(sql)
	if kw == "" {
		if strings.TrimSpace(rest) == "" {
			return "empty SQL"
		}
		return ""
	}
	if kw == "SET" {
		// SET LOCAL and SET CONSTRAINTS end with the transaction; plain
		// SET would outlive it in the pooled session.
		switch next, _ := leadingKeyword(rest); next {
		case "LOCAL", "CONSTRAINTS":
		default:
			return "SET outlives the transaction; use SET LOCAL"
		}
	}
	if why, ok := refusedKeywords[kw]; ok {
		return kw + " is not allowed in a fenced write (" + why + ")"
	}
	if touchesFencegate(sql) {
		return "statements must not reference the fencegate schema"
	}
	return ""
}

// leadingKeyword returns the first word of sql, upper-cased, after white
// space and comments (-- and nested /* */), and the text after it.
func leadingKeyword(sql string) (kw, rest string) {
	s := skipSpaceAndComments(sql)
	i := 0
	for i < len(s) && isWordByte(s[i]) {
		i++
	}
	return strings.ToUpper(s[:i]), s[i:]
}

func skipSpaceAndComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n\f\v")
		switch {
		case strings.HasPrefix(s, "--"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		case strings.HasPrefix(s, "/*"):
			depth, i := 1, 2
			for i < len(s) && depth > 0 {
				switch {
				case strings.HasPrefix(s[i:], "/*"):
					depth++
					i += 2
				case strings.HasPrefix(s[i:], "*/"):
					depth--
					i += 2
				default:
					i++
				}
			}
			s = s[i:]
		default:
			return s
		}
	}
}

func isWordByte(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// touchesFencegate reports whether sql names the fencegate schema
// (fencegate. or "fencegate".). A best effort against accidents, not a
// security boundary: privileges are (see the package doc).
func touchesFencegate(sql string) bool {
	lower := strings.ToLower(sql)
	for i := 0; ; {
		j := strings.Index(lower[i:], "fencegate")
		if j < 0 {
			return false
		}
		j += i
		k := j + len("fencegate")
		if k < len(lower) && lower[k] == '"' {
			k++
		}
		k += len(lower[k:]) - len(strings.TrimLeft(lower[k:], " \t\r\n"))
		before := j == 0 || !isWordByte(lower[j-1])
		if before && k < len(lower) && lower[k] == '.' {
			return true
		}
		i = j + 1
	}
}
