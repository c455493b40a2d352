package resp

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// writer encodes replies into a buffer that the session flushes when it
// has no more input to answer.
type writer struct {
	bw    *bufio.Writer
	resp3 bool
	num   [24]byte
}

func newWriter(w io.Writer) *writer {
	return &writer{bw: bufio.NewWriterSize(w, 16<<10)}
}

// err is the error of a write to the connection that failed, if one did:
// the buffer keeps it and writes nothing more (a Write of nothing
// returns it).
func (w *writer) err() error {
	_, err := w.bw.Write(nil)
	return err
}

func (w *writer) prefixed(p byte, n int64) {
	b := append(w.num[:0], p)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, '\r', '\n')
	_, _ = w.bw.Write(b)
}

func (w *writer) status(s string) {
	_ = w.bw.WriteByte('+')
	_, _ = w.bw.WriteString(s)
	_, _ = w.bw.WriteString("\r\n")
}

// error writes an error reply; line ends in msg become spaces, since a
// reply cannot carry them.
func (w *writer) error(msg string) {
	if strings.ContainsAny(msg, "\r\n") {
		msg = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(msg)
	}
	_ = w.bw.WriteByte('-')
	_, _ = w.bw.WriteString(msg)
	_, _ = w.bw.WriteString("\r\n")
}

func (w *writer) errorf(format string, args ...any) { w.error(fmt.Sprintf(format, args...)) }

func (w *writer) integer(n int64) { w.prefixed(':', n) }

func (w *writer) bulk(s string) {
	w.prefixed('$', int64(len(s)))
	_, _ = w.bw.WriteString(s)
	_, _ = w.bw.WriteString("\r\n")
}

func (w *writer) null() {
	if w.resp3 {
		_, _ = w.bw.WriteString("_\r\n")
		return
	}
	_, _ = w.bw.WriteString("$-1\r\n")
}

// nullArray writes RESP2's null array, or RESP3's null.
func (w *writer) nullArray() {
	if w.resp3 {
		_, _ = w.bw.WriteString("_\r\n")
		return
	}
	_, _ = w.bw.WriteString("*-1\r\n")
}

// double writes a RESP3 double, given as the text Redis formats it in (the
// same as the bulk string it sends in RESP2), or that bulk string in RESP2.
// A text with a line end, which no double has, stays a bulk string: a
// value taken for a score by mistake must not end the reply early and
// write the rest as replies of its own.
func (w *writer) double(s string) {
	if !w.resp3 || strings.ContainsAny(s, "\r\n") {
		w.bulk(s)
		return
	}
	_ = w.bw.WriteByte(',')
	_, _ = w.bw.WriteString(s)
	_, _ = w.bw.WriteString("\r\n")
}

func (w *writer) array(n int) { w.prefixed('*', int64(n)) }

// mapHeader starts a map of n pairs: a RESP3 map, or a flat array of 2n
// elements in RESP2.
func (w *writer) mapHeader(n int) {
	if w.resp3 {
		w.prefixed('%', int64(n))
		return
	}
	w.array(2 * n)
}

// setHeader starts a set of n members: a RESP3 set, or an array in RESP2.
func (w *writer) setHeader(n int) {
	if w.resp3 {
		w.prefixed('~', int64(n))
		return
	}
	w.array(n)
}

// value writes a reply as proxy/redis returns it: string, int64, nil or
// []any of those. Strings are bulk strings.
func (w *writer) value(v any) {
	switch v := v.(type) {
	case string:
		w.bulk(v)
	case int64:
		w.integer(v)
	case nil:
		w.null()
	case []any:
		w.array(len(v))
		for _, e := range v {
			w.value(e)
		}
	default:
		w.bulk(fmt.Sprint(v))
	}
}

func (w *writer) flush() error { return w.bw.Flush() }
