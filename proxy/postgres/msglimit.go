package postgres

import (
	"encoding/binary"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// minMessageLen is the least maxMessageLen: room for any row within
// small result limits, and for what a server sends besides rows.
const minMessageLen = 8 << 20

// maxMessageLen bounds each message fencegate's connections read from the
// server. pgx reads a message whole, up to 1 GiB, before anything looks at
// it, and PostgreSQL quotes a statement's input in its errors (invalid
// input syntax for type integer: "…"), so one write could otherwise make
// fencegate hold a gigabyte or three (the message, then its fields as
// strings) only for clipPgError to cut it to a kilobyte. Rows are
// weighed by the result guard as text, and their binary form, which
// fencegate asks for, may be a few times larger (a polygon's point: 6
// bytes of text, 16 of binary), hence the factor.
func maxMessageLen(maxResultBytes int64) int {
	return int(max(minMessageLen, min(4*maxResultBytes+1<<20, 1<<30)))
}

// limitFrontend wraps build so that the frontend it builds reads no
// message longer than limit: the first such message ends the connection,
// its reads failing with *messageTooLargeError, which says what kind of
// message it was. pgproto3's own limit (SetMaxBodyLen) would do the same
// without telling an error from a notice or a row; the kind decides
// whether the write may have committed.
func limitFrontend(build pgconn.BuildFrontendFunc, limit int) pgconn.BuildFrontendFunc {
	return func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return build(&messageLimiter{r: r, limit: limit}, w)
	}
}

// messageLimiter follows the message boundaries of a server's stream as
// it passes, and cuts the stream in front of the header of a message
// longer than limit.
type messageLimiter struct {
	r     io.Reader
	limit int

	hdr  [5]byte // the header being read: type, then length
	nhdr int     // bytes of hdr read
	body int     // bytes of the current message's body still to pass
	err  *messageTooLargeError
}

func (m *messageLimiter) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	n, err := m.r.Read(p)
	for i := 0; i < n; {
		if m.body > 0 {
			k := min(m.body, n-i)
			m.body -= k
			i += k
			continue
		}
		start := i - m.nhdr // where this header began: before p if < 0
		k := copy(m.hdr[m.nhdr:], p[i:n])
		m.nhdr += k
		i += k
		if m.nhdr < len(m.hdr) {
			break
		}
		m.nhdr = 0
		m.body = max(0, int(int32(binary.BigEndian.Uint32(m.hdr[1:])))-4)
		if m.body > m.limit {
			m.err = &messageTooLargeError{typ: m.hdr[0], size: m.body, limit: m.limit}
			// Pass what came before the header; the reads for the
			// header (or the rest of one begun in an earlier read) get
			// the error.
			if start <= 0 {
				return 0, m.err
			}
			return start, nil
		}
	}
	return n, err
}

// messageTooLargeError is a message from the server over maxMessageLen.
// The connection is closed.
type messageTooLargeError struct {
	typ   byte // the message's type: 'E' an error, 'N' a notice, 'D' a row…
	size  int  // its body's length
	limit int
}

func (e *messageTooLargeError) Error() string {
	return "the server sent " + e.what() + " of " + strconv.Itoa(e.size) + " bytes, over fencegate's limit of " +
		strconv.Itoa(e.limit) + " bytes for one message (4 × MaxResultBytes + 1 MiB, at least 8 MiB); the connection was closed"
}

func (e *messageTooLargeError) what() string {
	switch e.typ {
	case 'E':
		return "an error"
	case 'N':
		return "a notice"
	case 'D':
		return "a row"
	}
	return fmt.Sprintf("a message (type %q)", e.typ)
}

// rolledBack says the server refused the statement: an ErrorResponse read
// before its write's ReadyForQuery ends that write's transaction, which
// cannot commit after it.
func (e *messageTooLargeError) rolledBack() bool { return e.typ == 'E' }
