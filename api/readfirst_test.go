package api_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// TestReadFirstBounded: writes that read etcd before use (a fence read
// before use, as redis-lease fences are, or any fence while the watch is
// lost) are bounded as the writes in flight are: with etcd's answers
// stalled, MaxInFlight of them wait for their reads and the next are
// refused OVERLOADED at once, making no read. Unbounded, each would wait
// for a read of its own (one etcd read per request).
func TestReadFirstBounded(t *testing.T) {
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	sp := newStallProxy(t, strings.TrimPrefix(strings.TrimPrefix(etcdEndpoints[0], "http://"), "https://"))
	pcli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + sp.lis.Addr().String()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pcli.Close() })
	w := runWatcher(t, pcli)
	pg := openPostgres(t)
	cfg := proxy.DefaultConfig()
	cfg.MaxInFlight = 2
	cfg.VerifyTimeout = 5 * time.Second
	gw, err := proxy.New(cfg, proxy.Options{Terms: w, Postgres: pg, ReadBeforeUse: func(_, _ string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	leader := campaign(t, newEtcdClient(t), fence, "leader")
	waitFor(t, "term", func() bool { return w.Term(fence).Rev == leader.token })
	write := func(i int) error {
		stmt := postgres.Statement{SQL: "INSERT INTO " + table + "(worker, token) VALUES ($1, $2)", Params: []any{fmt.Sprint("w", i), leader.token}}
		_, _, err := gw.Exec(t.Context(), fence, fmt.Sprint(leader.token), []postgres.Statement{stmt})
		return err
	}
	if err := write(0); err != nil {
		t.Fatalf("a write while etcd answers: %v", err)
	}

	sp.stall(true)
	var wg sync.WaitGroup
	waiting := make([]error, cfg.MaxInFlight)
	for i := range waiting {
		wg.Add(1)
		go func() { defer wg.Done(); waiting[i] = write(1 + i) }()
	}
	time.Sleep(500 * time.Millisecond) // their reads are out, and stalled
	const more = 6
	start := time.Now()
	for i := range more {
		err := write(10 + i)
		if r, ok := tokens.AsRefusal(err); !ok || r.Reason != tokens.ReasonOverloaded {
			t.Errorf("write %d past %d waiting for etcd: got %v, want OVERLOADED", i, cfg.MaxInFlight, err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d refusals took %v: they waited for etcd", more, d)
	}
	sp.stall(false)
	wg.Wait()
	for i, err := range waiting {
		t.Logf("write %d that waited for its read: %v", i, err)
	}
	if err := write(99); err != nil {
		t.Errorf("a write once etcd answers again: %v", err)
	}
}

// stallProxy forwards TCP to target; stalled, it holds what it reads
// from either side until it is not.
type stallProxy struct {
	lis     net.Listener
	target  string
	mu      sync.Mutex
	stalled bool
	resume  *sync.Cond
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{lis: lis, target: target}
	p.resume = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		lis.Close()
		p.stall(false)
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.copy(u, c); u.Close(); c.Close() }()
		go func() { defer p.wg.Done(); p.copy(c, u); u.Close(); c.Close() }()
	}
}

func (p *stallProxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled {
				p.resume.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall(on bool) {
	p.mu.Lock()
	p.stalled = on
	p.mu.Unlock()
	if !on {
		p.resume.Broadcast()
	}
}
