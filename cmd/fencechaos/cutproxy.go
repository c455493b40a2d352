package main

import (
	"errors"
	"net"
	"sync"
)

// cutProxy forwards TCP connections from a loopback port to a target and
// can cut them off as a network partition would: while cut, bytes in
// either direction are swallowed (not refused: the peers see silence, not
// a reset) and new connections are accepted but never reach the target.
// Restore closes every connection that lived through the cut, as TCP
// timeouts would have, and forwards new ones again.
//
// It can also stall: hold every byte coming back from the target (the
// requests still reach it) until Release, as a congested or lossy link
// does. A client that sent a request during a stall learns its answer only
// afterwards, however long the target took.
//
// A hand-written proxy rather than toxiproxy: cut, restore, stall and
// release are all the campaign needs, and it keeps go.mod as it is.
type cutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool
	stalled chan struct{} // non-nil during a stall; closed by Release
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// proxyConn is one client connection and, unless it arrived during a cut,
// its connection to the target.
type proxyConn struct {
	client, server net.Conn
	frozen         bool // lived through a cut: swallow, then close on restore
}

func newCutProxy(target string) (*cutProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		pc := &proxyConn{client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		cut := p.cut
		pc.frozen = cut
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(pc, cut)
		}()
	}
}

func (p *cutProxy) serve(pc *proxyConn, cut bool) {
	defer p.drop(pc)
	if cut {
		swallow(pc.client)
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	pc.server = s
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(pc, pc.server, pc.client, false); done <- struct{}{} }()
	go func() { p.pipe(pc, pc.client, pc.server, true); done <- struct{}{} }()
	<-done
	// One direction ended: end both.
	pc.client.Close()
	pc.server.Close()
	<-done
}

// pipe copies from src to dst, swallowing what it reads while pc is frozen.
// On the way back from the target (back), it holds what it read while the
// proxy is stalled until the stall ends.
func (p *cutProxy) pipe(pc *proxyConn, dst, src net.Conn, back bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			frozen, stalled := pc.frozen, p.stalled
			p.mu.Unlock()
			if back && stalled != nil {
				<-stalled
			}
			if !frozen {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func swallow(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

func (p *cutProxy) drop(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.client.Close()
	if pc.server != nil {
		pc.server.Close()
	}
}

// Cut starts a partition.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for pc := range p.conns {
		pc.frozen = true
	}
}

// Restore ends a partition: connections that lived through it are closed.
func (p *cutProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for pc := range p.conns {
		if pc.frozen {
			pc.client.Close()
			if pc.server != nil {
				pc.server.Close()
			}
		}
	}
}

// Stall starts holding the bytes that come back from the target.
func (p *cutProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Release ends a stall: what was held is delivered, in order.
func (p *cutProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// Close stops the proxy and closes every connection.
func (p *cutProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	for pc := range p.conns {
		pc.client.Close()
		if pc.server != nil {
			pc.server.Close()
		}
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
