package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/fencegate/fencegate/api/internal/wire"
)

// protocolError is malformed or oversized input: the client gets it as an
// error reply and the connection is closed, as Redis does, because what
// follows in the stream cannot be framed any more.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "resp: protocol error: " + e.msg }

func protoErr(format string, args ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, args...)}
}

// limits bound what one command may make fencegate read and hold.
type limits struct {
	maxArgs, maxBulk, maxCommand, maxInline int
}

// Redis's limits for a client that has not authenticated: a few small
// arguments are enough for AUTH and HELLO, and nobody can make the server
// hold more before it knows who they are.
const (
	unauthArgs = 10
	unauthBulk = 16384
)

// reader parses client commands: RESP arrays of bulk strings, and inline
// commands (a line of words) as redis-cli and telnet users send.
type reader struct {
	br  *bufio.Reader
	lim limits
	// unauth: the client has not logged in, so a command is held to
	// Redis's limits for unauthenticated clients (unauthArgs, unauthBulk).
	unauth bool
	// scratch holds one command's argument bytes; ends their ends in it.
	scratch []byte
	ends    []int
	// ahead is the connection's read-ahead when r reads from one: what
	// it holds has arrived too (buffered).
	ahead *readAhead
}

func newReader(r io.Reader, lim limits) *reader {
	ahead, _ := r.(*readAhead)
	return &reader{br: bufio.NewReaderSize(r, 16<<10), lim: lim, ahead: ahead}
}

// buffered reports whether the client has begun another command, so that
// it can be read without waiting for the client: its first line has
// arrived (or more than the buffer holds of it). Empty commands before it
// (empty or blank inline lines, *0, *-1), which Redis skips, are consumed
// first: the client expects the answers to what it sent before them, and
// sends nothing more until it has them.
func (r *reader) buffered() bool {
	for {
		b, _ := r.br.Peek(r.br.Buffered())
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(b) == r.br.Size() {
				return true // a line longer than the buffer: inline, or an error to report
			}
			if r.ahead == nil || r.ahead.waiting() == 0 {
				return false
			}
			// More has arrived: take it in, which does not wait.
			_, _ = r.br.Peek(len(b) + 1)
			continue
		}
		if !emptyCommand(b[:i]) {
			return true
		}
		_, _ = r.br.Discard(i + 1)
	}
}

// emptyCommand reports whether line, up to its LF, is a command Redis
// skips: an inline line of nothing but spaces, or a multibulk of no
// arguments (*0, or a negative count).
func emptyCommand(line []byte) bool {
	if len(line) > 0 && line[0] == '*' {
		n, err := length('*', bytes.TrimSuffix(line[1:], []byte{'\r'}), math.MaxInt32)
		return err == nil && n <= 0
	}
	for _, c := range line {
		if !asciiSpace(rune(c)) {
			return false
		}
	}
	return true
}

// command reads the next command. Its arguments share one allocation.
// Empty commands are skipped (emptyCommand). Errors are io errors or
// *protocolError.
func (r *reader) command() ([]string, error) {
	for {
		b, err := r.br.ReadByte()
		if err != nil {
			return nil, err
		}
		if b != '*' {
			if err := r.br.UnreadByte(); err != nil {
				return nil, err
			}
			args, err := r.inline()
			if err != nil || len(args) > 0 {
				return args, err
			}
			continue
		}
		n, err := r.number('*', r.lim.maxArgs)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			continue // Redis ignores empty and null arrays.
		}
		if r.unauth && n > unauthArgs {
			return nil, protoErr("unauthenticated multibulk length")
		}
		r.scratch, r.ends = r.scratch[:0], r.ends[:0]
		for range n {
			b, err := r.br.ReadByte()
			if err != nil {
				return nil, unexpectedEOF(err)
			}
			if b != '$' {
				return nil, protoErr("expected '$', got %q", b)
			}
			size, err := r.number('$', r.lim.maxBulk)
			if err != nil {
				return nil, err
			}
			if size < 0 {
				return nil, protoErr("invalid bulk length")
			}
			if r.unauth && size > unauthBulk {
				return nil, protoErr("unauthenticated bulk length")
			}
			if len(r.scratch)+size > r.lim.maxCommand {
				return nil, protoErr("command of more than %d bytes", r.lim.maxCommand)
			}
			start := len(r.scratch)
			if r.scratch, err = wire.AppendFull(r.scratch, r.br, size+2, r.br.Size()); err != nil {
				return nil, unexpectedEOF(err)
			}
			if r.scratch[start+size] != '\r' || r.scratch[start+size+1] != '\n' {
				return nil, protoErr("bulk string not followed by CRLF")
			}
			r.scratch = r.scratch[:start+size]
			r.ends = append(r.ends, len(r.scratch))
		}
		return r.split(), nil
	}
}

// maxKeptScratch is the most of scratch a reader keeps between commands:
// one large command must not make an idle connection hold its size.
const maxKeptScratch = 64 << 10

// split turns scratch and ends into arguments backed by one string.
func (r *reader) split() []string {
	all := string(r.scratch)
	if cap(r.scratch) > maxKeptScratch {
		r.scratch = nil
	}
	args := make([]string, len(r.ends))
	start := 0
	for i, end := range r.ends {
		args[i] = all[start:end]
		start = end
	}
	return args
}

// number reads the decimal after a '*' or '$' up to CRLF, refusing one
// above limit.
func (r *reader) number(kind byte, limit int) (int, error) {
	line, err := r.line(32)
	if err != nil {
		return 0, err
	}
	return length(kind, line, limit)
}

// length parses the decimal of a '*' or '$' line. A negative one, which
// Redis takes for none (string2ll: no leading zero), comes back as -1.
func length(kind byte, line []byte, limit int) (int, error) {
	if len(line) == 0 {
		return 0, protoErr("invalid %s length", lengthName(kind))
	}
	digits := line
	if line[0] == '-' {
		digits = line[1:]
		if len(digits) == 0 || digits[0] == '0' {
			return 0, protoErr("invalid %s length %q", lengthName(kind), line)
		}
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, protoErr("invalid %s length %q", lengthName(kind), line)
		}
		if line[0] == '-' {
			continue
		}
		n = n*10 + int(c-'0')
		if n > limit {
			return 0, protoErr("%s length over the limit of %d", lengthName(kind), limit)
		}
	}
	if line[0] == '-' {
		return -1, nil
	}
	return n, nil
}

func lengthName(kind byte) string {
	if kind == '*' {
		return "multibulk"
	}
	return "bulk"
}

// line reads up to CRLF (or LF, as Redis accepts inline) and returns it
// without the line end, refusing lines longer than limit.
func (r *reader) line(limit int) ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > limit+2 {
		return nil, protoErr("line over the limit of %d bytes", limit)
	}
	if err != nil {
		return nil, unexpectedEOF(err)
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// inline reads an inline command: words separated by spaces or tabs.
// Quoting is not supported; a quote character is refused rather than
// taken literally.
func (r *reader) inline() ([]string, error) {
	line, err := r.longLine(r.lim.maxInline)
	if err != nil {
		return nil, err
	}
	if bytes.ContainsAny(line, "\"'") {
		return nil, protoErr("quotes in inline commands are not supported; send RESP arrays")
	}
	r.scratch, r.ends = r.scratch[:0], r.ends[:0]
	for _, w := range bytes.FieldsFunc(line, asciiSpace) {
		if len(r.ends) == r.lim.maxArgs {
			return nil, protoErr("multibulk length over the limit of %d", r.lim.maxArgs)
		}
		r.scratch = append(r.scratch, w...)
		r.ends = append(r.ends, len(r.scratch))
	}
	if len(r.ends) == 0 {
		return nil, nil
	}
	return r.split(), nil
}

// asciiSpace is what separates an inline command's arguments: the C
// locale's isspace, as Redis's sdssplitargs has it. Other Unicode spaces
// (U+00A0, U+3000) are part of an argument.
func asciiSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

// longLine reads a line that may be longer than the read buffer.
func (r *reader) longLine(limit int) ([]byte, error) {
	var buf []byte
	for {
		part, err := r.br.ReadSlice('\n')
		if len(buf)+len(part) > limit+2 {
			return nil, protoErr("too big inline request (limit %d bytes)", limit)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			buf = append(buf, part...)
			continue
		}
		if err != nil {
			return nil, unexpectedEOF(err)
		}
		if buf != nil {
			part = append(buf, part...)
		}
		part = part[:len(part)-1]
		if n := len(part); n > 0 && part[n-1] == '\r' {
			part = part[:n-1]
		}
		return part, nil
	}
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
