// Package netfault is a TCP proxy that breaks the link it carries on
// command, as networks and restarts do: a silent partition (Cut), a hard
// one where every connection is reset and new ones are closed at once
// (Drop), a congested link that holds answers back (Stall), and a server
// replaced by another at a new address (Retarget).
//
// fencechaos drives its partitions with it, and tests use it to cut a
// client off from etcd, ZooKeeper, PostgreSQL or Redis. Like freeport it
// lives low in the import graph and imports nothing of fencegate's.
//
// A hand-written proxy rather than toxiproxy: these four faults are all
// the tests and the campaign need, and it keeps go.mod as it is.
package netfault

import (
	"errors"
	"net"
	"sync"
)

// Proxy forwards TCP connections from a loopback port to a target until
// told to fail. It is safe for concurrent use.
type Proxy struct {
	ln net.Listener

	mu      sync.Mutex
	target  string
	cut     bool          // silent partition: swallow, and hold new connections
	dropped bool          // hard partition: close new connections at once
	stalled chan struct{} // non-nil during a stall; closed by Release
	conns   map[*conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// conn is one client connection and, unless it arrived during a cut, its
// connection to the target.
type conn struct {
	client, server net.Conn
	frozen         bool // lived through a cut: swallow, then close on Restore
}

// New starts a proxy on a free loopback port that forwards to target
// (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		pc := &conn{client: c}
		p.mu.Lock()
		if closed := p.closed; closed || p.dropped {
			p.mu.Unlock()
			c.Close()
			if closed {
				return
			}
			continue
		}
		cut, target := p.cut, p.target
		pc.frozen = cut
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.serve(pc, cut, target)
		}()
	}
}

func (p *Proxy) serve(pc *conn, cut bool, target string) {
	defer p.forget(pc)
	if cut {
		swallow(pc.client)
		return
	}
	s, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	p.mu.Lock()
	pc.server = s
	gone := p.closed || p.dropped
	p.mu.Unlock()
	if gone {
		return
	}
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
func (p *Proxy) pipe(pc *conn, dst, src net.Conn, back bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			stalled := p.stalled
			p.mu.Unlock()
			if back && stalled != nil {
				<-stalled
			}
			// Read after the stall: an answer held through a cut is
			// swallowed, not delivered into the partition.
			p.mu.Lock()
			frozen := pc.frozen
			p.mu.Unlock()
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

func (p *Proxy) forget(pc *conn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.close()
}

func (pc *conn) close() {
	pc.client.Close()
	if pc.server != nil {
		pc.server.Close()
	}
}

// Cut starts a silent partition: bytes in either direction are swallowed
// (the peers see silence, not a reset) and new connections are accepted
// but never reach the target, until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for pc := range p.conns {
		pc.frozen = true
	}
}

// Drop starts a hard partition: every connection is closed now, and new
// ones are closed as soon as they are accepted, until Restore. Peers see
// resets and ends of stream, as when the target's host restarts.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped = true
	for pc := range p.conns {
		pc.close()
	}
}

// Restore ends a partition (Cut or Drop): connections that lived through a
// cut are closed, as TCP timeouts would have closed them, and new
// connections are forwarded again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.dropped = false, false
	for pc := range p.conns {
		if pc.frozen {
			pc.close()
		}
	}
}

// Retarget sends new connections to target from now on; connections
// already made stay with the old one (Drop them to move every client).
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Stall starts holding the bytes that come back from the target; requests
// still reach it.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Release ends a stall: what was held is delivered, in order.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	for pc := range p.conns {
		pc.close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
