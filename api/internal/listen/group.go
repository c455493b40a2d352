package listen

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// Conn is a served connection a Group can close.
type Conn interface {
	comparable
	// CloseIfIdle closes the connection when it waits for its client; a
	// busy one ends once it has answered what it read (Shutdown).
	CloseIfIdle()
	// CloseNow closes it at once (Close).
	CloseNow()
}

// Group is a wire-protocol listener's connections: the accept loop with
// its count of open connections, and graceful shutdown. Its zero value is
// ready to use; it must not be copied.
type Group[C Conn] struct {
	mu    sync.Mutex
	lis   map[net.Listener]struct{}
	conns map[C]struct{}
	wg    sync.WaitGroup
	// closing is set under mu, and read without it by connections, which
	// must not take mu.
	closing atomic.Bool
	open    atomic.Int64
	refused atomic.Uint64
}

// Serve accepts connections on lis until Shutdown or Close, when it
// returns ErrClosing; any other error is Accept's. admit is called in the
// accept loop with the number of open connections counting the new one: a
// connection it turns away (false) is counted as refused, then given to
// refuse, in the loop, to answer and close (so a client that sees the
// answer finds it counted). handle serves an admitted one on a goroutine
// of its own, with the same count.
func (g *Group[C]) Serve(lis net.Listener, admit func(open int64) bool, refuse func(c net.Conn), handle func(c net.Conn, open int64)) error {
	g.mu.Lock()
	if g.closing.Load() {
		g.mu.Unlock()
		return ErrClosing
	}
	if g.lis == nil {
		g.lis = map[net.Listener]struct{}{}
	}
	g.lis[lis] = struct{}{}
	g.mu.Unlock()
	var acc Acceptor
	for {
		c, err := acc.Accept(lis, g.Closing)
		if err != nil {
			return err
		}
		n := g.open.Add(1)
		if !admit(n) {
			g.open.Add(-1)
			g.refused.Add(1)
			refuse(c)
			continue
		}
		g.mu.Lock()
		if g.closing.Load() {
			g.mu.Unlock()
			g.open.Add(-1)
			c.Close()
			return ErrClosing
		}
		g.wg.Add(1)
		g.mu.Unlock()
		go func() {
			defer g.wg.Done()
			defer g.open.Add(-1)
			handle(c, n)
		}()
	}
}

// CountRefusal counts a connection refused after it was admitted (as
// pgwire refuses one over its limit once it has read its startup message).
func (g *Group[C]) CountRefusal() { g.refused.Add(1) }

// Connections returns the connections open (being served, refusals in
// progress included) and how many were refused.
func (g *Group[C]) Connections() (open int64, refused uint64) {
	return g.open.Load(), g.refused.Load()
}

// Track adds c to the connections Shutdown and Close reach (on), or
// removes it. Adding fails once the group is closing: the caller closes c.
func (g *Group[C]) Track(c C, on bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !on {
		delete(g.conns, c)
		return true
	}
	if g.closing.Load() {
		return false
	}
	if g.conns == nil {
		g.conns = map[C]struct{}{}
	}
	g.conns[c] = struct{}{}
	return true
}

// Each calls f for every tracked connection. f runs with the group's
// lock held: it must be quick and must not call the group.
func (g *Group[C]) Each(f func(c C)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.conns {
		f(c)
	}
}

// Closing reports whether Shutdown or Close was called.
func (g *Group[C]) Closing() bool { return g.closing.Load() }

// Shutdown stops accepting, closes idle connections at once and every
// other one when it is done with what it read, and waits for them until
// ctx is done; then it calls closeAll (the server's Close, which calls
// the group's) and waits for the rest.
func (g *Group[C]) Shutdown(ctx context.Context, closeAll func()) error {
	g.mu.Lock()
	g.stopListening()
	for c := range g.conns {
		c.CloseIfIdle()
	}
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		closeAll()
		<-done
		return ctx.Err()
	}
}

// Close stops accepting and closes every connection now.
func (g *Group[C]) Close() {
	g.mu.Lock()
	g.stopListening()
	for c := range g.conns {
		c.CloseNow()
	}
	g.mu.Unlock()
}

// stopListening is called with mu held.
func (g *Group[C]) stopListening() {
	if g.closing.Swap(true) {
		return
	}
	for l := range g.lis {
		l.Close()
	}
}
