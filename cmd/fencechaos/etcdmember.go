package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcdMember runs one member of the campaign's etcd cluster in this
// process until ctx is done (SIGTERM, SIGINT) or the server fails.
func runEtcdMember(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("etcd-member", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("data-dir", "", "data directory (kept across restarts)")
	clientURL := fs.String("client-url", "", "client URL, http://127.0.0.1:port")
	peerURL := fs.String("peer-url", "", "peer URL, http://127.0.0.1:port")
	cluster := fs.String("initial-cluster", "", "name=peer-url,... of every member")
	heartbeat := fs.Duration("heartbeat", 100*time.Millisecond, "raft heartbeat interval")
	electionTimeout := fs.Duration("election-timeout", time.Second, "raft election timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *dir == "" || *clientURL == "" || *peerURL == "" || *cluster == "" {
		return errors.New("etcd-member: --name, --data-dir, --client-url, --peer-url and --initial-cluster are required")
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		return fmt.Errorf("--client-url: %w", err)
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		return fmt.Errorf("--peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = *cluster
	cfg.InitialClusterToken = "fencechaos"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs = uint(heartbeat.Milliseconds())
	cfg.ElectionMs = uint(electionTimeout.Milliseconds())
	// A process crash loses nothing the kernel has; the campaign never
	// crashes the machine.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd-member %s: %w", *name, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd-member %s: ready on %s\n", *name, *clientURL)
	case err := <-e.Err():
		return fmt.Errorf("etcd-member %s: %w", *name, err)
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd-member %s: %w", *name, err)
	case <-e.Server.StopNotify():
		return fmt.Errorf("etcd-member %s: server stopped", *name)
	case <-ctx.Done():
		return nil
	}
}
