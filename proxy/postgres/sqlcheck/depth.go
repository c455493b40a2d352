package sqlcheck

import (
	"strconv"
	"strings"
)

// MaxDepth is how deep a statement may nest, as TooDeep estimates it, for
// Check and the PostgreSQL listener to hand it to PostgreSQL's parser.
//
// libpg_query turns its parse tree into protobuf by recursing once per
// level on the C stack of the calling thread, and its stack depth check
// never fires: past the thread's stack (RLIMIT_STACK, 2 MiB when
// unlimited) the process dies with SIGSEGV, which Go cannot recover. A
// left-deep chain (SELECT 1+1+...+1) overflows 8 MiB at about 24,000
// levels, 2 MiB at 6,000, 1 MiB at 3,000. PostgreSQL itself refuses such a
// chain past about 4,100 levels (max_stack_depth 2MB), pg_query_go's
// protobuf decoder past 5,000.
const MaxDepth = 2000

// whyDeep is why Check refuses what TooDeep finds too deep.
var whyDeep = "statement nests deeper than fencegate parses (" + strconv.Itoa(MaxDepth) + " levels)"

// TooDeep reports whether sql may nest more than MaxDepth levels deep, and
// if so the byte offset at which its estimate passes MaxDepth.
//
// The estimate is lexical and an upper bound: it reads sql as PostgreSQL's
// scanner does (strings, quoted identifiers, dollar quotes and comments
// are skipped) and counts each bracket and CASE as 4 levels, each operator,
// "::", postfix or infix keyword (IS, COLLATE, LIKE, ...), set operation
// and JOIN as 1. Lists do not add up: a comma, an AND or OR
// (flattened by the parser), or a WHEN, THEN or ELSE starts a sibling.
// Multi-row VALUES, long IN lists and AND or OR chains, large literals and
// function bodies stay shallow.
func TooDeep(sql string) (pos int, deep bool) {
	// Every level of a parse tree takes a byte of text at least (a prefix
	// operator: SELECT +-+-+-a), so a short statement cannot get there.
	if len(sql) <= MaxDepth {
		return -1, false
	}
	_, pos = depthOf(sql, MaxDepth)
	return pos, pos >= 0
}

// Weights, in levels of a binary operator (about 360 bytes of C stack).
// The costliest group measured is WITH a AS (INSERT ... RETURNING 1), 3.5.
const (
	stmtLevels  = 6 // the statement, its target or clause, down to an expression
	groupLevels = 4 // a bracket, or CASE ... END
	boolLevels  = 2 // a BoolExpr, and an OR of ANDs
)

// depthGroup is an open bracket or CASE, or the statement itself.
//
// Within it, a sequence of operands and operators (1 + (SELECT ...) ::
// int) is as deep as its deepest operand plus all of its operators, as
// a chain may be left-deep or right-deep; a sequence ends at AND or OR
// (whose operands are its siblings), an expression at a comma, WHEN,
// THEN or ELSE. Set operations and joins, whose trees are left-deep
// across all of those, push everything in the group down a level each.
type depthGroup struct {
	open byte // '(', '[', 'c' for CASE, 0 for the statement
	// abs is the depth the group starts at: its enclosing groups' levels
	// down to it, and its own.
	abs      int
	fixed    int // set operations and joins
	listPeak int // the deepest expression ended
	seqPeak  int // the deepest sequence ended by AND or OR in this expression
	boolean  bool
	chain    int  // operators and infix or postfix keywords of this sequence
	operand  int  // the deepest bracket or CASE of this sequence
	between  bool // a BETWEEN whose AND is still to come
}

// expr is the depth of the expression so far.
func (g *depthGroup) expr() int {
	d := max(g.seqPeak, g.chain+g.operand)
	if g.boolean {
		d += boolLevels
	}
	return d
}

// depth is the depth of the group's contents so far.
func (g *depthGroup) depth() int { return g.fixed + max(g.listPeak, g.expr()) }

// next is where a bracket or CASE opened now starts.
func (g *depthGroup) next() int {
	d := g.abs + g.fixed + g.chain + groupLevels
	if g.boolean {
		d += boolLevels
	}
	return d
}

// sibling ends an expression: what comes next is beside it.
func (g *depthGroup) sibling() {
	g.listPeak = max(g.listPeak, g.expr())
	g.seqPeak, g.boolean, g.chain, g.operand, g.between = 0, false, 0, 0, false
}

// depthOf estimates the deepest nesting of sql. It stops at the byte where
// the estimate first passes limit, and returns it as pos; pos is -1 when
// the estimate never passes limit.
func depthOf(sql string, limit int) (depth, pos int) {
	stack := make([]depthGroup, 1, 16)
	stack[0].abs = stmtLevels
	// pop closes the innermost group: it is an operand of its parent.
	pop := func() {
		d := groupLevels + stack[len(stack)-1].depth()
		stack = stack[:len(stack)-1]
		g := &stack[len(stack)-1]
		g.operand = max(g.operand, d)
	}
	label := false // the next word is a name: after '.' or AS
	start := 0
	for i := 0; i < len(sql); {
		g := &stack[len(stack)-1]
		c := sql[i]
		start = i
		wasLabel := label
		label = false
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
			label = wasLabel
			continue
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			i = lineEnd(sql, i)
			label = wasLabel
			continue
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = commentEnd(sql, i)
			label = wasLabel
		case c == '\'':
			i = stringEnd(sql, i+1, false)
		case c == '"':
			i = identEnd(sql, i+1)
		case c == '$':
			i = dollarEnd(sql, i)
		case isIdentStart(c):
			j := i + 1
			for j < len(sql) && isIdentCont(sql[j]) {
				j++
			}
			word := sql[i:j]
			i = j
			if (word == "e" || word == "E") && i < len(sql) && sql[i] == '\'' {
				i = stringEnd(sql, i+1, true)
				break
			}
			if wasLabel {
				break
			}
			switch keywordOf(word) {
			case kwChain:
				g.chain++
			case kwBetween:
				g.chain++
				g.between = true
			case kwFixed:
				g.fixed++
			case kwAs:
				label = true
			case kwBool:
				if g.between {
					g.between = false
					g.chain++
					break
				}
				g.seqPeak = max(g.seqPeak, g.chain+g.operand)
				g.chain, g.operand, g.boolean = 0, 0, true
			case kwSibling:
				g.sibling()
			case kwCase:
				stack = append(stack, depthGroup{open: 'c', abs: g.next()})
			case kwEnd:
				if g.open == 'c' {
					pop()
				}
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9':
			// Letters after digits are junk to PostgreSQL 17's scanner:
			// an error, whatever they spell.
			i++
			for i < len(sql) && (isIdentCont(sql[i]) && sql[i] != '$' || sql[i] == '.') {
				i++
			}
		case c == '.':
			i++
			label = true
		case c == '(' || c == '[':
			i++
			stack = append(stack, depthGroup{open: c, abs: g.next()})
		case c == ')' || c == ']':
			i++
			open := byte('(')
			if c == ']' {
				open = '['
			}
			for k := len(stack) - 1; k > 0; k-- {
				if stack[k].open == open {
					for len(stack) > k {
						pop()
					}
					break
				}
			}
		case c == ',':
			i++
			g.sibling()
		case c == ';':
			i++
			if len(stack) == 1 {
				*g = depthGroup{abs: stmtLevels} // statements are siblings
			}
		case c == ':' && i+1 < len(sql) && sql[i+1] == ':':
			i += 2
			g.chain++
		case isOpChar(c):
			// One operator, but the scanner splits a run ending in + or -
			// (+-+-a is four prefix operators): each after the first
			// starts with one.
			g.chain++
			for i++; i < len(sql) && isOpChar(sql[i]) && !strings.HasPrefix(sql[i:], "--") && !strings.HasPrefix(sql[i:], "/*"); i++ {
				if sql[i] == '+' || sql[i] == '-' {
					g.chain++
				}
			}
		default:
			i++
		}
		if i < 0 {
			break // an unterminated string or comment: the parser refuses it
		}
		top := &stack[len(stack)-1]
		if d := top.abs + top.depth(); d > depth {
			if depth = d; depth > limit {
				return depth, start
			}
		}
	}
	for len(stack) > 1 {
		pop()
	}
	if d := stack[0].abs + stack[0].depth(); d > depth {
		if depth = d; depth > limit {
			return depth, start
		}
	}
	return depth, -1
}

type keyword uint8

const (
	kwNone    keyword = iota
	kwChain           // an infix or postfix keyword: a level each
	kwBetween         // BETWEEN: its AND is not a BoolExpr's
	kwFixed           // UNION, INTERSECT, EXCEPT, JOIN
	kwBool            // AND, OR
	kwSibling         // WHEN, THEN, ELSE
	kwCase
	kwEnd
	kwAs
)

// keywordOf classifies word, in any case, without allocating.
func keywordOf(word string) keyword {
	var names []string
	switch len(word) {
	case 2:
		names = []string{"is", "at", "in", "or", "as"}
	case 3:
		names = []string{"not", "and", "end"}
	case 4:
		names = []string{"like", "join", "when", "then", "else", "case"}
	case 5:
		names = []string{"ilike", "union"}
	case 6:
		names = []string{"isnull", "escape", "except"}
	case 7:
		names = []string{"notnull", "collate", "similar", "between"}
	case 8:
		names = []string{"overlaps", "operator"}
	case 9:
		names = []string{"intersect"}
	default:
		return kwNone
	}
	for _, n := range names {
		if !strings.EqualFold(word, n) {
			continue
		}
		switch n {
		case "between":
			return kwBetween
		case "union", "intersect", "except", "join":
			return kwFixed
		case "and", "or":
			return kwBool
		case "when", "then", "else":
			return kwSibling
		case "case":
			return kwCase
		case "end":
			return kwEnd
		case "as":
			return kwAs
		}
		return kwChain
	}
	return kwNone
}

// isIdentStart and isIdentCont are PostgreSQL's ident_start and
// ident_cont: any byte of a multi-byte character is a letter.
func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

func isOpChar(c byte) bool {
	return strings.IndexByte("~!@#^&|`?+-*/%<>=", c) >= 0
}

// lineEnd returns the end of the "--" comment at i: the LF or CR, which
// is white space, or the end of sql.
func lineEnd(sql string, i int) int {
	if j := strings.IndexAny(sql[i:], "\n\r"); j >= 0 {
		return i + j
	}
	return len(sql)
}

// commentEnd returns the byte after the nested "/* */" comment at i, or
// -1 if it does not end.
func commentEnd(sql string, i int) int {
	depth := 0
	for i < len(sql)-1 {
		switch {
		case sql[i] == '/' && sql[i+1] == '*':
			depth++
			i += 2
		case sql[i] == '*' && sql[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return -1
}

// stringEnd returns the byte after the string whose text starts at i, a
// backslash escaping the next byte when escapes is set (E'...'), or -1 if
// it does not end. As in PostgreSQL, a quote after white space holding a
// newline continues the string, escapes and all (E'a', a newline, then a
// quoted backslash-quote: the backslash escapes that quote).
func stringEnd(sql string, i int, escapes bool) int {
	for i < len(sql) {
		switch sql[i] {
		case '\\':
			if escapes {
				i += 2
				continue
			}
			i++
		case '\'':
			if i+1 < len(sql) && sql[i+1] == '\'' {
				i += 2
				continue
			}
			i++
			next, ok := continuation(sql, i)
			if !ok {
				return i
			}
			i = next
		default:
			i++
		}
	}
	return -1
}

// continuation reports whether the string that ended before i goes on,
// and where its text does: PostgreSQL's quotecontinue, white space with a
// newline (and "--" comments) then a quote.
func continuation(sql string, i int) (int, bool) {
	// horiz_whitespace*: [ \t\f] and comments.
	for i < len(sql) {
		if c := sql[i]; c == ' ' || c == '\t' || c == '\f' {
			i++
		} else if strings.HasPrefix(sql[i:], "--") {
			i = lineEnd(sql, i)
		} else {
			break
		}
	}
	if i >= len(sql) || sql[i] != '\n' && sql[i] != '\r' {
		return 0, false
	}
	// special_whitespace*: white space, and comments ending at a newline.
	for i++; i < len(sql); {
		if c := sql[i]; c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' {
			i++
		} else if strings.HasPrefix(sql[i:], "--") {
			j := lineEnd(sql, i)
			if j == len(sql) {
				return 0, false
			}
			i = j + 1
		} else {
			break
		}
	}
	if i < len(sql) && sql[i] == '\'' {
		return i + 1, true
	}
	return 0, false
}

// identEnd returns the byte after the quoted identifier whose text starts
// at i, or -1 if it does not end.
func identEnd(sql string, i int) int {
	for i < len(sql) {
		j := strings.IndexByte(sql[i:], '"')
		if j < 0 {
			return -1
		}
		i += j + 1
		if i < len(sql) && sql[i] == '"' {
			i++
			continue
		}
		return i
	}
	return -1
}

// dollarEnd returns the byte after the parameter ($1) or dollar-quoted
// string ($tag$...$tag$) at i, or after the lone '$', or -1 if the string
// does not end.
func dollarEnd(sql string, i int) int {
	j := i + 1
	if j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		return j
	}
	// dolqdelim: \$({dolq_start}{dolq_cont}*)?\$
	for j < len(sql) && (isIdentStart(sql[j]) || j > i+1 && sql[j] >= '0' && sql[j] <= '9') {
		j++
	}
	if j >= len(sql) || sql[j] != '$' {
		return i + 1
	}
	delim := sql[i : j+1]
	k := strings.Index(sql[j+1:], delim)
	if k < 0 {
		return -1
	}
	return j + 1 + k + len(delim)
}
