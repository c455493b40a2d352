package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/api"
)

// servePprof serves Go's profiles on addr until ctx is done, on a mux of
// its own: importing net/http/pprof for its side effect would put them on
// http.DefaultServeMux. It returns the address listened on.
//
// The listener has no authentication, and a web page can reach it on
// loopback under a name of its own (DNS rebinding): it answers only a Host
// that is an IP address or localhost. It does not serve the command line,
// which may hold passwords (--postgres-dsn, --etcd-password).
func servePprof(ctx context.Context, g *errgroup.Group, addr string) (string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--pprof-addr: %w", err)
	}
	hs := &http.Server{Handler: pprofHandler(), ReadHeaderTimeout: 10 * time.Second}
	g.Go(func() error {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("pprof: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return hs.Close()
	})
	return lis.Addr().String(), nil
}

func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "fencegate: the command line is not served: it may hold passwords", http.StatusNotFound)
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "" && !api.LocalHost(r.Host) { // no Host (HTTP/1.0) is no browser's
			http.Error(w, fmt.Sprintf("fencegate: refused Host %.100q on the pprof listener: only an IP address or localhost names this machine "+
				"(a web page reaches it under a name of its own: DNS rebinding); connect to 127.0.0.1 or localhost", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		mux.ServeHTTP(w, r)
	})
}
