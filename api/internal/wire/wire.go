// Package wire holds what both drop-in listeners need to read a client's
// length-prefixed data without trusting the length.
package wire

import (
	"io"
	"slices"
)

// AppendFull appends the next n bytes of r to dst, as io.ReadFull would
// read them, but grows dst with what arrives rather than by n at once:
// each read asks for at most max(len(dst), step) more bytes, so a client
// that claims a large length and sends little makes the caller hold about
// what it sent. On an error dst is returned as it was, with io.ReadFull's
// error.
func AppendFull(dst []byte, r io.Reader, n, step int) ([]byte, error) {
	start := len(dst)
	for n > 0 {
		k := min(n, max(len(dst), step))
		dst = slices.Grow(dst, k)
		at := len(dst)
		dst = dst[:at+k]
		if _, err := io.ReadFull(r, dst[at:]); err != nil {
			return dst[:start], err
		}
		n -= k
	}
	return dst, nil
}
