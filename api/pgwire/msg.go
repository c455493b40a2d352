package pgwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/api/internal/wire"
)

// maxMessage bounds one protocol message after startup that fencegate
// holds whole to read it (Config.MaxMessage): a query, a statement to
// prepare, a server's answer to fencegate's own statements. PostgreSQL's
// own limit is 1 GB; a proxy that buffers a message needs a lower one.
// Messages it passes on without reading (msgReader.streams) have no limit
// of its own.
const maxMessage = 256 << 20

// maxAuthMessage bounds a client's message while it is not yet logged in
// (a password or SASL response): PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH.
const maxAuthMessage = 65535

// bufSize is the read and write buffer of each side of a session: most
// messages fit, so they are forwarded from the read buffer without a copy
// of their own.
const bufSize = 32 << 10

// keepBuf returns b to be kept as a session's buffer for its next message,
// or nil if b grew past 2*bufSize: one large query or error must not pin
// its size for as long as the connection lives.
func keepBuf(b []byte) []byte {
	if cap(b) > 2*bufSize {
		return nil
	}
	return b
}

// msgReader frames PostgreSQL messages (type byte, int32 length, body).
type msgReader struct {
	r       *bufio.Reader
	pending int    // bytes of the last message still to discard
	big     []byte // body of a message larger than the buffer
	// limit bounds a message body's length.
	limit int
	// streams lists the message types passed on as they arrive when
	// larger than the buffer: next returns a buffer's worth of such a
	// message, and the rest follows through copyBody (or is skipped by
	// the next call of next). Their length is the server's to bound.
	streams string
	rest    int // bytes of a streamed message not yet read
}

func newMsgReader(r io.Reader) *msgReader {
	return &msgReader{r: bufio.NewReaderSize(r, bufSize), limit: maxMessage}
}

// next returns the next message: its type, its body and the whole message
// as received (raw, for forwarding). Both slices are valid until the next
// call only.
//
// A message of a type in streams that is larger than the buffer comes
// back as its first buffer's worth, header included: body and raw are
// prefixes, streamed reports it, and copyBody passes on the rest.
func (m *msgReader) next() (typ byte, body, raw []byte, err error) {
	if m.pending > 0 {
		_, _ = m.r.Discard(m.pending) // all buffered
		m.pending = 0
	}
	if m.rest > 0 {
		_, err := m.r.Discard(m.rest)
		m.rest = 0
		if err != nil {
			return 0, nil, nil, unexpectedEOF(err)
		}
	}
	hdr, err := m.r.Peek(5)
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, nil, err
	}
	typ = hdr[0]
	n := int(int32(binary.BigEndian.Uint32(hdr[1:5])))
	if n < 4 {
		return 0, nil, nil, fmt.Errorf("pgwire: message %q of invalid length %d", typ, n)
	}
	if n+1 > m.r.Size() && strings.IndexByte(m.streams, typ) >= 0 {
		raw, err = m.r.Peek(m.r.Size())
		if err != nil {
			return 0, nil, nil, unexpectedEOF(err)
		}
		m.pending, m.rest = len(raw), n+1-len(raw)
		return typ, raw[5:], raw, nil
	}
	if n-4 > m.limit {
		return 0, nil, nil, &tooLong{typ: typ, n: n + 1, limit: m.limit}
	}
	if n+1 <= m.r.Size() {
		raw, err = m.r.Peek(n + 1)
		if err != nil {
			return 0, nil, nil, unexpectedEOF(err)
		}
		m.pending = n + 1
		return typ, raw[5:], raw, nil
	}
	// Read into a buffer that grows with what arrives, at most doubling
	// it, not to the length the header claims: five bytes must not make
	// fencegate allocate hundreds of megabytes and wait for them.
	raw, err = wire.AppendFull(m.big[:0], m.r, n+1, bufSize)
	m.big = raw
	if err != nil {
		return 0, nil, nil, unexpectedEOF(err)
	}
	if cap(m.big) > 16*bufSize {
		m.big = nil // a one-off: do not keep it
	}
	return typ, raw[5:], raw, nil
}

// tooLong is a message over a msgReader's limit, refused before any of
// its body is read.
type tooLong struct {
	typ      byte
	n, limit int // the message's bytes, header included; the body's bound
}

func (e *tooLong) Error() string {
	return fmt.Sprintf("message %q of %d bytes is over fencegate's limit of %d bytes for the messages it reads whole (COPY data and parameters have none)", e.typ, e.n, e.limit)
}

// streamed reports whether next returned the start of a message, the
// rest still to come (copyBody).
func (m *msgReader) streamed() bool { return m.rest > 0 }

// copyBody writes the rest of the streamed message to w as it arrives, a
// buffer at a time. What next returned is no longer valid.
func (m *msgReader) copyBody(w io.Writer) error {
	_, _ = m.r.Discard(m.pending) // all buffered
	m.pending = 0
	for m.rest > 0 {
		if m.r.Buffered() == 0 {
			if _, err := m.r.Peek(1); err != nil {
				return unexpectedEOF(err)
			}
		}
		b, _ := m.r.Peek(min(m.rest, m.r.Buffered()))
		if _, err := w.Write(b); err != nil {
			return err
		}
		_, _ = m.r.Discard(len(b))
		m.rest -= len(b)
	}
	return nil
}

// buffered reports whether another message is (at least partly) already read.
func (m *msgReader) buffered() bool { return m.r.Buffered() > m.pending+m.rest }

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}

// Messages fencegate writes itself. Each appends to dst.

func beginMsg(dst []byte, typ byte) ([]byte, int) {
	sp := len(dst)
	return append(dst, typ, 0, 0, 0, 0), sp
}

func finishMsg(dst []byte, sp int) []byte {
	binary.BigEndian.PutUint32(dst[sp+1:], uint32(len(dst)-sp-1))
	return dst
}

func appendCString(dst []byte, s string) []byte { return append(append(dst, s...), 0) }

func appendReadyForQuery(dst []byte, status byte) []byte {
	return append(dst, 'Z', 0, 0, 0, 5, status)
}

func appendParseComplete(dst []byte) []byte { return append(dst, '1', 0, 0, 0, 4) }

func appendCommandComplete(dst []byte, tag string) []byte {
	dst, sp := beginMsg(dst, 'C')
	return finishMsg(appendCString(dst, tag), sp)
}

// appendShow appends SHOW's answer of one text setting: RowDescription,
// DataRow and CommandComplete.
func appendShow(dst []byte, name, value string) []byte {
	return appendShowValue(appendShowRow(dst, name, false), value)
}

// appendShowRow appends the RowDescription of SHOW name: one text column,
// in binary format if binaryFormat (text's binary form is its text).
func appendShowRow(dst []byte, name string, binaryFormat bool) []byte {
	dst, sp := beginMsg(dst, 'T')
	dst = append(dst, 0, 1) // one field
	dst = appendCString(dst, name)
	dst = append(dst, 0, 0, 0, 0)             // no table
	dst = append(dst, 0, 0)                   // no column
	dst = append(dst, 0, 0, 0, 25)            // type text
	dst = append(dst, 0xff, 0xff)             // variable length
	dst = append(dst, 0xff, 0xff, 0xff, 0xff) // no modifier
	if binaryFormat {
		dst = append(dst, 0, 1)
	} else {
		dst = append(dst, 0, 0)
	}
	return finishMsg(dst, sp)
}

// appendShowValue appends SHOW's DataRow of value and CommandComplete.
func appendShowValue(dst []byte, value string) []byte {
	dst, sp := beginMsg(dst, 'D')
	dst = append(dst, 0, 1)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(value)))
	dst = append(dst, value...)
	dst = finishMsg(dst, sp)
	return appendCommandComplete(dst, "SHOW")
}

// pgError is an ErrorResponse fencegate sends.
type pgError struct {
	Severity string // ERROR or FATAL
	Code     string
	Message  string
	Detail   string
	Hint     string
}

func appendError(dst []byte, e pgError) []byte {
	dst, sp := beginMsg(dst, 'E')
	dst = appendCString(append(dst, 'S'), e.Severity)
	dst = appendCString(append(dst, 'V'), e.Severity)
	dst = appendCString(append(dst, 'C'), e.Code)
	dst = appendCString(append(dst, 'M'), e.Message)
	if e.Detail != "" {
		dst = appendCString(append(dst, 'D'), e.Detail)
	}
	if e.Hint != "" {
		dst = appendCString(append(dst, 'H'), e.Hint)
	}
	return finishMsg(append(dst, 0), sp)
}

// appendQuery appends a Query message of the parts' concatenation.
func appendQuery(dst []byte, parts ...[]byte) []byte {
	dst, sp := beginMsg(dst, 'Q')
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return finishMsg(append(dst, 0), sp)
}

func appendParse(dst []byte, name, query string) []byte {
	dst, sp := beginMsg(dst, 'P')
	dst = appendCString(dst, name)
	dst = appendCString(dst, query)
	return finishMsg(append(dst, 0, 0), sp) // no parameter types
}

// appendClose closes the prepared statement ('S') or portal ('P') name;
// closing one that does not exist is no error.
func appendClose(dst []byte, what byte, name string) []byte {
	dst, sp := beginMsg(dst, 'C')
	dst = append(dst, what)
	dst = appendCString(dst, name)
	return finishMsg(dst, sp)
}

// appendBindCheck binds portal to the fence check stmt with the fence and
// token as text parameters.
func appendBindCheck(dst []byte, portal, stmt, fence string, token uint64) []byte {
	dst, sp := beginMsg(dst, 'B')
	dst = appendCString(dst, portal)
	dst = appendCString(dst, stmt)
	dst = append(dst, 0, 0) // parameter formats: all text
	dst = append(dst, 0, 2) // two parameters
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(fence)))
	dst = append(dst, fence...)
	lp := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = strconv.AppendUint(dst, token, 10)
	binary.BigEndian.PutUint32(dst[lp:], uint32(len(dst)-lp-4))
	dst = append(dst, 0, 0) // result formats: all text
	return finishMsg(dst, sp)
}

func appendExecuteUnnamed(dst []byte) []byte {
	return append(dst, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
}

// appendExecute executes all of portal.
func appendExecute(dst []byte, portal string) []byte {
	dst, sp := beginMsg(dst, 'E')
	dst = appendCString(dst, portal)
	dst = append(dst, 0, 0, 0, 0) // no row limit
	return finishMsg(dst, sp)
}

func appendSync(dst []byte) []byte { return append(dst, 'S', 0, 0, 0, 4) }

// errorFields walks an ErrorResponse or NoticeResponse body.
func errorField(body []byte, code byte) (string, bool) {
	for len(body) > 0 && body[0] != 0 {
		c := body[0]
		v, rest, ok := cstring(body[1:])
		if !ok {
			return "", false
		}
		if c == code {
			return string(v), true
		}
		body = rest
	}
	return "", false
}
