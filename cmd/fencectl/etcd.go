package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// dialEtcd connects to etcd and checks that it answers, so a wrong
// endpoint is one clear line rather than a hang.
func dialEtcd(ctx context.Context, g *globalConfig) (*clientv3.Client, error) {
	tlsCfg, err := g.etcdTLS()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   g.etcdEndpoints(),
		DialTimeout: g.DialTimeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
		TLS:         tlsCfg,
		Username:    g.EtcdUser,
		Password:    g.EtcdPassword,
	})
	if err != nil {
		return nil, g.etcdError(err)
	}
	cctx, cancel := context.WithTimeout(ctx, g.DialTimeout)
	defer cancel()
	if _, err := cli.Get(cctx, "health", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, g.etcdError(err)
	}
	return cli, nil
}

// etcdError is err from reaching etcd as one line that names the flags to
// check: clientv3 says only "context deadline exceeded" of an endpoint
// that never answers.
func (g *globalConfig) etcdError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcd at %s is unreachable: no answer within --dial-timeout %v (check --etcd-endpoints, or raise --dial-timeout)", g.EtcdEndpoints, g.DialTimeout)
	}
	return fmt.Errorf("etcd at %s: %w", g.EtcdEndpoints, err)
}

// etcdTLS is the client TLS toward etcd, or nil when no TLS flag is set
// and no endpoint says https.
func (g *globalConfig) etcdTLS() (*tls.Config, error) {
	https := false
	for _, e := range g.etcdEndpoints() {
		https = https || strings.HasPrefix(e, "https://")
	}
	if g.EtcdCACert == "" && g.EtcdCert == "" && !https {
		return nil, nil
	}
	return clientTLS("--etcd-cacert", g.EtcdCACert, "--etcd-cert", g.EtcdCert, g.EtcdKey)
}

// clientTLS builds a client TLS config trusting caFile (the system's roots
// when empty) and presenting certFile, if set. Errors name the flag.
func clientTLS(caFlag, caFile, certFlag, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caFlag, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", caFlag, caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", certFlag, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// leader is one election's current leader as read from etcd.
type leader struct {
	Election string `json:"election"`
	Leader   string `json:"leader"`
	Term     int64  `json:"term,string"`
	Key      string `json:"key"`
	// Candidates counts the keys in the election, the leader's included.
	Candidates int `json:"candidates"`
}

// listLeaders reads every election under prefix with one linearizable read:
// the leader of each is its key with the lowest create revision (etcd's
// concurrency.Election rule).
func listLeaders(ctx context.Context, cli *clientv3.Client, prefix string) ([]leader, int64, error) {
	root := prefix + "/"
	resp, err := cli.Get(ctx, root, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: list %s: %w", root, err)
	}
	byName := map[string]*leader{}
	for _, kv := range resp.Kvs {
		name, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), root), "/")
		if !ok || name == "" {
			continue
		}
		l := byName[name]
		if l == nil {
			l = &leader{Election: name}
			byName[name] = l
		}
		l.Candidates++
		if l.Term == 0 || kv.CreateRevision < l.Term {
			l.Term, l.Leader, l.Key = kv.CreateRevision, string(kv.Value), string(kv.Key)
		}
	}
	out := make([]leader, 0, len(byName))
	for _, l := range byName {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b leader) int { return cmp.Compare(a.Election, b.Election) })
	return out, resp.Header.Revision, nil
}
