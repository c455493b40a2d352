package sqlcheck

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"
)

// DefaultCacheBytes bounds the verdict cache when Config.CacheBytes is 0.
const DefaultCacheBytes = 4 << 20

// Config says what caller SQL may do. The zero value is the default policy:
// one SELECT, INSERT, UPDATE, DELETE or MERGE per string, no sleeping.
type Config struct {
	// MaxSleep is the longest pg_sleep(x) or pg_sleep_for(interval) allowed,
	// with a constant argument. Longer or non-constant sleeps, and every
	// pg_sleep_until, are refused; 0 refuses every sleep.
	MaxSleep time.Duration
	// Allow widens the top-level statements allowed, for trusted
	// deployments, by these names:
	//
	//	"truncate"  TRUNCATE
	//	"lock"      LOCK TABLE
	//	"ddl"       CREATE, ALTER (and RENAME), DROP and COMMENT ON of tables,
	//	            indexes, views, materialized views and sequences, and
	//	            CREATE TABLE AS; never temporary ones, never OWNER TO or
	//	            row security
	//
	// What is allowed is still walked whole: the fencegate schema, temporary
	// objects and refused functions stay refused inside it. Nothing that
	// would break the fence is ever allowed, whatever Allow says: transaction
	// control, SET and RESET, COPY, PREPARE and EXECUTE, DO and CALL,
	// functions, rules, triggers and extensions, roles and privileges, LOAD,
	// VACUUM.
	Allow []string
	// CacheBytes bounds the verdict cache, keyed by the SQL text: 0 means
	// DefaultCacheBytes, a negative value turns the cache off.
	CacheBytes int
}

// allowNames are the names Config.Allow accepts.
var allowNames = map[string]bool{"truncate": true, "lock": true, "ddl": true}

// Checker decides whether a caller's SQL string may run inside a fenced
// write. It is safe for concurrent use.
type Checker struct {
	maxSleep time.Duration
	allow    map[string]bool
	cache    *cache // nil when turned off
}

// New returns a Checker for cfg, or an error naming what in cfg is wrong.
func New(cfg Config) (*Checker, error) {
	if cfg.MaxSleep < 0 {
		return nil, fmt.Errorf("sqlcheck: MaxSleep %v is negative", cfg.MaxSleep)
	}
	c := &Checker{maxSleep: cfg.MaxSleep, allow: map[string]bool{}}
	for _, a := range cfg.Allow {
		if !allowNames[a] {
			return nil, fmt.Errorf("sqlcheck: unknown Allow name %q (known: %s)", a, knownAllowNames())
		}
		c.allow[a] = true
	}
	switch {
	case cfg.CacheBytes == 0:
		c.cache = newCache(DefaultCacheBytes)
	case cfg.CacheBytes > 0:
		c.cache = newCache(cfg.CacheBytes)
	}
	return c, nil
}

// CheckAllow says whether name may be given in Config.Allow: nil, or
// an error naming the names that may.
func CheckAllow(name string) error {
	if !allowNames[name] {
		return fmt.Errorf("unknown statement kind %q: want %s", name, knownAllowNames())
	}
	return nil
}

func knownAllowNames() string {
	names := make([]string, 0, len(allowNames))
	for n := range allowNames {
		names = append(names, strconv.Quote(n))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Statement is what Check learnt about an accepted statement.
type Statement struct {
	// Kind is the statement's SQL name: SELECT, INSERT, UPDATE, DELETE,
	// MERGE, or a kind Config.Allow widened to (TRUNCATE, CREATE TABLE, ...).
	Kind string
	// ReturnsRows is set for SELECT and VALUES, and for DML with RETURNING.
	ReturnsRows bool
	// ModifyingCTE is set when a WITH holds INSERT, UPDATE, DELETE or MERGE
	// (PostgreSQL allows those only at the top level, so the statement cannot
	// be nested in another WITH).
	ModifyingCTE bool
	// Text is the statement alone: the SQL without leading and trailing
	// white space, comments and semicolons. It is a substring of the SQL and
	// ends at a token, so it can be embedded as
	// "WITH x AS MATERIALIZED (\n" + Text + "\n) ...".
	Text string
}

// Refusal is the error of Check: what was refused, where, and why. A
// Refusal from Check may be shared by callers and must not be modified.
type Refusal struct {
	// What names the refused thing: a statement kind ("COMMIT"), a call
	// ("call to set_config"), a name ("fencegate.fences"), ...
	What string
	// Pos is the 0-based byte offset in the SQL, or -1 if unknown.
	Pos int
	// Why says what refusing it protects.
	Why string
}

func (r *Refusal) Error() string {
	if r.Pos < 0 {
		return "sqlcheck: " + r.What + ": " + r.Why
	}
	return "sqlcheck: " + r.What + " at byte " + strconv.Itoa(r.Pos) + ": " + r.Why
}

// Check parses sql with PostgreSQL's parser and returns what it holds, or
// a *Refusal. Verdicts are cached by the exact text, so checking a string
// seen before costs a map look-up and allocates nothing.
func (c *Checker) Check(sql string) (Statement, error) {
	if c.cache == nil {
		return c.check(sql)
	}
	if st, ok, err := c.cache.get(sql); ok {
		return st, err
	}
	// The cache keeps its own copy: sql may be a slice of a large request.
	key := strings.Clone(sql)
	st, err := c.check(key)
	c.cache.put(key, st, err)
	return st, err
}

// check is Check without the cache. Every error it returns is a *Refusal.
func (c *Checker) check(sql string) (Statement, error) {
	// The parser takes a C string, and PostgreSQL refuses what is not its
	// encoding: check both, so what is parsed here is what the server parses.
	if i := strings.IndexByte(sql, 0); i >= 0 {
		return Statement{}, &Refusal{What: "NUL byte", Pos: i, Why: "SQL text cannot hold NUL"}
	}
	if !utf8.ValidString(sql) {
		return Statement{}, &Refusal{What: "invalid UTF-8", Pos: firstInvalidUTF8(sql), Why: "SQL text must be UTF-8"}
	}
	// A tree deep enough would overflow the C stack in pg_query: SIGSEGV.
	if pos, deep := TooDeep(sql); deep {
		return Statement{}, &Refusal{What: "deep nesting", Pos: pos, Why: whyDeep}
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		var perr *parser.Error
		if errors.As(err, &perr) {
			return Statement{}, &Refusal{What: "unparsable SQL", Pos: charToByte(sql, perr.Cursorpos), Why: perr.Message}
		}
		return Statement{}, &Refusal{What: "unparsable SQL", Pos: -1, Why: err.Error()}
	}
	switch len(tree.Stmts) {
	case 0:
		return Statement{}, &Refusal{What: "empty SQL", Pos: -1, Why: "no statement, only white space, comments or ';'"}
	case 1:
	default:
		return Statement{}, &Refusal{
			What: "second statement", Pos: skipSpaceAndComments(sql, int(tree.Stmts[1].StmtLocation)),
			Why: "a SQL string holds exactly one statement",
		}
	}
	raw := tree.Stmts[0]
	start := skipSpaceAndComments(sql, int(raw.StmtLocation))
	st, ref := c.checkTree(raw.Stmt, start)
	if ref != nil {
		return Statement{}, ref
	}
	text, err := statementText(sql)
	if err != nil {
		return Statement{}, &Refusal{What: "unparsable SQL", Pos: -1, Why: err.Error()}
	}
	st.Text = text
	return st, nil
}

// statementText returns sql without leading and trailing comments, white
// space and semicolons. Only a scanner knows where a trailing comment
// starts (a "--" may sit in a string), so it asks PostgreSQL's.
func statementText(sql string) (string, error) {
	// Without a comment or a semicolon anywhere, white space is all there
	// is to trim, and a second pass through the C scanner (a fifth of an
	// uncached check) is not needed.
	if !strings.Contains(sql, "--") && !strings.Contains(sql, "/*") && !strings.Contains(sql, ";") {
		if t := strings.Trim(sql, " \t\n\r\f\v"); t != "" {
			return t, nil
		}
	}
	scan, err := pg_query.Scan(sql)
	if err != nil {
		return "", err
	}
	first, last := -1, -1
	for i, t := range scan.Tokens {
		switch t.Token {
		case pg_query.Token_SQL_COMMENT, pg_query.Token_C_COMMENT, pg_query.Token_ASCII_59:
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
	}
	if first < 0 {
		return "", errors.New("no tokens")
	}
	return sql[scan.Tokens[first].Start:scan.Tokens[last].End], nil
}

// skipSpaceAndComments returns the offset of the first token at or after i:
// PostgreSQL's white space, "--" comments (ending at LF or CR) and nested
// "/* */" comments are skipped.
func skipSpaceAndComments(sql string, i int) int {
	for i < len(sql) {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexAny(sql[i:], "\n\r")
			if j < 0 {
				return len(sql)
			}
			i += j + 1
		case strings.HasPrefix(sql[i:], "/*"):
			depth := 1
			for i += 2; i < len(sql) && depth > 0; {
				switch {
				case strings.HasPrefix(sql[i:], "/*"):
					depth++
					i += 2
				case strings.HasPrefix(sql[i:], "*/"):
					depth--
					i += 2
				default:
					i++
				}
			}
		default:
			return i
		}
	}
	return i
}

// charToByte maps the parser's 1-based character position to a 0-based
// byte offset, or -1 for none.
func charToByte(sql string, pos int) int {
	if pos <= 0 {
		return -1
	}
	n := 1
	for i := range sql {
		if n == pos {
			return i
		}
		n++
	}
	return len(sql)
}

func firstInvalidUTF8(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return -1
}
