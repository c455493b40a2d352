package postgres

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Red team 8: a TCP proxy between fencegate and PostgreSQL that reads the
// wire protocol in both directions, so a test can cut or stall the
// connection at a chosen message: after a write's Sync went to the
// server but before its ReadyForQuery came back, in the middle of a
// write's messages, and so on.

// rt8Msg is one protocol message: its type byte (0 for the startup or
// cancel packet) and all its bytes, header included.
type rt8Msg struct {
	typ byte
	raw []byte
}

// rt8Action is what a hook does with a message.
type rt8Action int

const (
	rt8Forward rt8Action = iota
	rt8Cut               // close both sides without forwarding the message
)

// rt8Link is one proxied connection.
type rt8Link struct {
	id             int
	client, server net.Conn
	cancel         bool // a cancel request's connection

	mu sync.Mutex
	// syncs are the Syncs sent to the server and not answered yet:
	// true for a write's (its segment had an Execute), false otherwise.
	syncs    []bool
	executes int // Executes since the last Sync
	binds    int // Binds since the last Sync
	writeZ   int // write Syncs answered (ReadyForQuery seen from the server)
	cut      bool
}

func (l *rt8Link) close() {
	l.mu.Lock()
	l.cut = true
	l.mu.Unlock()
	_ = l.client.Close()
	_ = l.server.Close()
}

// rt8Proxy forwards connections to target. front sees each message from
// fencegate before it is forwarded, back each message from the server;
// either may block (a stall) or return rt8Cut. seg is the message's
// place in its Sync segment (for front: Binds so far including this one;
// for back on a ReadyForQuery: whether it answers a write's Sync and how
// many write Syncs the link answered before).
type rt8Proxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	links []*rt8Link
	front func(l *rt8Link, m rt8Msg) rt8Action
	back  func(l *rt8Link, m rt8Msg, writeSync bool, writeZBefore int) rt8Action
	wg    sync.WaitGroup
}

func newRT8Proxy(t *testing.T, target string) *rt8Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rt8Proxy{t: t, ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, l := range p.links {
			l.close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// dsn is dsn with its host:port replaced by the proxy's.
func (p *rt8Proxy) dsn(dsn string) string {
	return strings.Replace(dsn, p.target, p.ln.Addr().String(), 1)
}

func (p *rt8Proxy) setFront(f func(l *rt8Link, m rt8Msg) rt8Action) {
	p.mu.Lock()
	p.front = f
	p.mu.Unlock()
}

func (p *rt8Proxy) setBack(f func(l *rt8Link, m rt8Msg, writeSync bool, writeZBefore int) rt8Action) {
	p.mu.Lock()
	p.back = f
	p.mu.Unlock()
}

func (p *rt8Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		l := &rt8Link{id: len(p.links), client: c, server: s}
		p.links = append(p.links, l)
		p.mu.Unlock()
		p.wg.Go(func() { p.pumpFront(l) })
	}
}

func rt8Read(r io.Reader, typed bool) (rt8Msg, error) {
	hdr := 4
	if typed {
		hdr = 5
	}
	buf := make([]byte, hdr)
	if _, err := io.ReadFull(r, buf); err != nil {
		return rt8Msg{}, err
	}
	n := int(binary.BigEndian.Uint32(buf[hdr-4:]))
	if n < 4 || n > 1<<30 {
		return rt8Msg{}, errors.New("rt8: bad message length " + strconv.Itoa(n))
	}
	raw := make([]byte, hdr+n-4)
	copy(raw, buf)
	if _, err := io.ReadFull(r, raw[hdr:]); err != nil {
		return rt8Msg{}, err
	}
	m := rt8Msg{raw: raw}
	if typed {
		m.typ = raw[0]
	}
	return m, nil
}

func (p *rt8Proxy) pumpFront(l *rt8Link) {
	defer l.close()
	first, err := rt8Read(l.client, false)
	if err != nil {
		return
	}
	if len(first.raw) >= 8 && binary.BigEndian.Uint32(first.raw[4:8]) == 80877102 {
		l.cancel = true
	}
	if _, err := l.server.Write(first.raw); err != nil {
		return
	}
	p.wg.Go(func() { p.pumpBack(l) })
	if l.cancel {
		_, _ = io.Copy(l.server, l.client)
		return
	}
	for {
		m, err := rt8Read(l.client, true)
		if err != nil {
			return
		}
		l.mu.Lock()
		switch m.typ {
		case 'B':
			l.binds++
		case 'E':
			l.executes++
		case 'S':
			l.syncs = append(l.syncs, l.executes > 0)
			l.executes, l.binds = 0, 0
		case 'Q':
			// A simple query is answered with a ReadyForQuery too.
			l.syncs = append(l.syncs, false)
		}
		l.mu.Unlock()
		p.mu.Lock()
		f := p.front
		p.mu.Unlock()
		if f != nil && f(l, m) == rt8Cut {
			return
		}
		if _, err := l.server.Write(m.raw); err != nil {
			return
		}
	}
}

func (p *rt8Proxy) pumpBack(l *rt8Link) {
	defer l.close()
	if l.cancel {
		_, _ = io.Copy(l.client, l.server)
		return
	}
	for {
		m, err := rt8Read(l.server, true)
		if err != nil {
			return
		}
		var writeSync bool
		var before int
		if m.typ == 'Z' {
			l.mu.Lock()
			if len(l.syncs) > 0 {
				writeSync = l.syncs[0]
				l.syncs = l.syncs[1:]
			}
			before = l.writeZ
			if writeSync {
				l.writeZ++
			}
			l.mu.Unlock()
		}
		p.mu.Lock()
		f := p.back
		p.mu.Unlock()
		if f != nil && f(l, m, writeSync, before) == rt8Cut {
			return
		}
		if _, err := l.client.Write(m.raw); err != nil {
			return
		}
	}
}
