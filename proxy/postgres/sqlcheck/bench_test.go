package sqlcheck

import (
	"strings"
	"testing"
	"time"
)

const benchInsert = "INSERT INTO jobs (id, state, payload, updated_at) VALUES ($1, $2, $3, now()) " +
	"ON CONFLICT (id) DO UPDATE SET state = excluded.state, payload = excluded.payload, updated_at = excluded.updated_at"

// BenchmarkOldFilter is the keyword filter sqlcheck replaces, for the
// cost ratio.
func BenchmarkOldFilter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if msg := oldFilter(benchInsert); msg != "" {
			b.Fatal(msg)
		}
	}
}

func BenchmarkCheckCached(b *testing.B) {
	c := newChecker(b, Config{MaxSleep: time.Second})
	if _, err := c.Check(benchInsert); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(benchInsert); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckCachedParallel(b *testing.B) {
	c := newChecker(b, Config{MaxSleep: time.Second})
	if _, err := c.Check(benchInsert); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Check(benchInsert); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkCheckUncached(b *testing.B) {
	c := newChecker(b, Config{MaxSleep: time.Second, CacheBytes: -1})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(benchInsert); err != nil {
			b.Fatal(err)
		}
	}
}

// The old keyword filter, copied from proxy/postgres/validate.go
// (checkStatement and its helpers), renamed.

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

func oldFilter(sql string) string {
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

// TestOldFilterMissesAttacks records why the filter was replaced: the
// old one let these through.
func TestOldFilterMissesAttacks(t *testing.T) {
	t.Parallel()
	for _, sql := range []string{
		"-- x\rCOMMIT\nWORK",
		`SELECT * FROM fencegate/**/.fences`,
		`SELECT * FROM U&"fenc\0065gate".fences`,
		`SELECT set_config('search_path','evil, pg_catalog, public', false)`,
		`SELECT pg_advisory_lock(7378697629483820646)`,
		`CREATE RULE r AS ON INSERT TO t DO INSTEAD NOTHING`,
		`CREATE TEMP TABLE jobs(id int)`,
	} {
		if msg := oldFilter(sql); msg != "" {
			t.Errorf("oldFilter(%q): got %q, want it missed (the copy is not the old filter)", sql, msg)
		}
	}
}
