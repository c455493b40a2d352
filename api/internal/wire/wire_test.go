package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestAppendFull(t *testing.T) {
	data := strings.Repeat("0123456789", 10000)
	got, err := AppendFull([]byte("head"), strings.NewReader(data+"tail"), len(data), 1024)
	if err != nil || string(got) != "head"+data {
		t.Fatalf("got %d bytes, %v; want %d", len(got), err, 4+len(data))
	}
	// Cut short: the error of io.ReadFull, dst as it was, and no more
	// room taken than about twice what arrived.
	got, err = AppendFull([]byte("head"), bytes.NewReader(make([]byte, 100<<10)), 200<<20, 32<<10)
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(got) != "head" {
		t.Fatalf("cut short: got %q, %v; want %q, %v", got, err, "head", io.ErrUnexpectedEOF)
	}
	if cap(got) > 1<<20 {
		t.Fatalf("cut short after 100 KiB of a claimed 200 MiB: capacity %d", cap(got))
	}
}
