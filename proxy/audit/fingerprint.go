package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"unsafe"
)

// Fingerprint returns the SHA-256, in hex, of parts (a write's statements,
// never its parameter values). Each part is prefixed with its length, so
// ["ab", "c"] and ["a", "bc"] differ.
func Fingerprint(parts ...string) string {
	var d Digest
	for _, p := range parts {
		d.Add(p)
	}
	return d.Sum()
}

// A Digest computes Fingerprint one part at a time, so that a transaction
// of any number of statements is fingerprinted in constant memory. The
// zero Digest is the fingerprint of no parts.
type Digest struct {
	h hash.Hash
	n [8]byte
}

// Add appends part to the parts d fingerprints.
func (d *Digest) Add(part string) {
	if d.h == nil {
		d.h = sha256.New()
	}
	binary.BigEndian.PutUint64(d.n[:], uint64(len(part)))
	d.h.Write(d.n[:])
	// Write neither keeps nor changes its argument (io.Writer), so the
	// part is hashed where it is, not copied.
	d.h.Write(unsafe.Slice(unsafe.StringData(part), len(part)))
}

// Sum returns Fingerprint of the parts added since the last Reset.
func (d *Digest) Sum() string {
	var sum [sha256.Size]byte
	if d.h == nil {
		return hex.EncodeToString(sha256.New().Sum(sum[:0]))
	}
	return hex.EncodeToString(d.h.Sum(sum[:0]))
}

// Reset forgets the parts added.
func (d *Digest) Reset() {
	if d.h != nil {
		d.h.Reset()
	}
}
