package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
)

// registerMetricsAddr defines --metrics-addr, etcd's --listen-metrics-urls:
// with mTLS on the HTTP port, neither the kubelet's probes nor Prometheus
// hold a client certificate, so they get a plain-HTTP listener of their
// own that serves nothing else.
func registerMetricsAddr(fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, "metrics-addr", *addr, "plain-HTTP listen address serving only /healthz, /readyz and /metrics, for probes and Prometheus without a client certificate (off when empty)")
}

// checkMetricsAddr refuses a metrics listener other hosts reach without a
// policy: /metrics shows each election's current term, which is a token,
// and without a policy a token is all a write needs.
func checkMetricsAddr(addr, policyFile string, insecure bool) error {
	if addr == "" || isLoopbackAddr(addr) || policyFile != "" || insecure {
		return nil
	}
	return fmt.Errorf("--metrics-addr %s is reachable from other hosts without --policy-file, and its /metrics shows every election's current term (a token): set --policy-file, listen on loopback, or pass --insecure", addr)
}

// listenMetricsAddr opens the --metrics-addr listener, or returns nil
// when it is off.
func listenMetricsAddr(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	return lis, nil
}

// serveMetricsAddr serves h on lis until ctx is done and returns the
// address listened on.
func serveMetricsAddr(ctx context.Context, g *errgroup.Group, lis net.Listener, h http.Handler) string {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	g.Go(func() error {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics listener: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return hs.Close()
	})
	return lis.Addr().String()
}
