package main

import "strings"

// This is fencegate's keyword filter from before PostgreSQL's parser
// (sqlcheck) replaced it: checkStatement and its helpers from
// proxy/postgres/validate.go at commit 1a8f432, renamed. It is kept only to
// be measured against in the sqlcheck scenario. It is NOT a defence: a CR
// ending a comment, quoted or Unicode-escaped identifiers, comments
// between a schema and its dot, and functions that run dynamic SQL all get
// past it (see sqlcheck's TestOldFilterMissesAttacks).

var oldRefusedKeywords = map[string]string{
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

// oldCheckStatement returns why the old filter refused sql, or "".
func oldCheckStatement(sql string) string {
	kw, rest := oldLeadingKeyword(sql)
	if kw == "" {
		if strings.TrimSpace(rest) == "" {
			return "empty SQL"
		}
		return ""
	}
	if kw == "SET" {
		switch next, _ := oldLeadingKeyword(rest); next {
		case "LOCAL", "CONSTRAINTS":
		default:
			return "SET outlives the transaction; use SET LOCAL"
		}
	}
	if why, ok := oldRefusedKeywords[kw]; ok {
		return kw + " is not allowed in a fenced write (" + why + ")"
	}
	if oldTouchesFencegate(sql) {
		return "statements must not reference the fencegate schema"
	}
	return ""
}

func oldLeadingKeyword(sql string) (kw, rest string) {
	s := oldSkipSpaceAndComments(sql)
	i := 0
	for i < len(s) && oldIsWordByte(s[i]) {
		i++
	}
	return strings.ToUpper(s[:i]), s[i:]
}

func oldSkipSpaceAndComments(s string) string {
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

func oldIsWordByte(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func oldTouchesFencegate(sql string) bool {
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
		before := j == 0 || !oldIsWordByte(lower[j-1])
		if before && k < len(lower) && lower[k] == '.' {
			return true
		}
		i = j + 1
	}
}
