package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencegate/fencegate/cmd/internal/addrflag"
	"github.com/fencegate/fencegate/election/embedded"
	pgthrowaway "github.com/fencegate/fencegate/proxy/postgres/throwaway"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

const devSummary = `Serve on embedded defaults, for trying fencegate out: an embedded etcd with
its client URL on 127.0.0.1:2379, a throwaway PostgreSQL made with this
machine's server binaries and a throwaway Redis (when redis-server is
installed), each on a free port (or --postgres-port, --redis-port), and the
gateway on its default ports. Everything is removed on Ctrl-C or SIGTERM.`

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	holdSIGHUP()
	cfg := defaultServeConfig()
	cfg.PgListenAddr = "127.0.0.1:7432"
	cfg.RedisListenAddr = "127.0.0.1:7379"
	etcdURL := "http://127.0.0.1:2379"
	var pgPort, redisPort int
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.StringVar(&etcdURL, "etcd-listen", etcdURL, "client URL of the embedded etcd")
	fs.IntVar(&pgPort, "postgres-port", 0, "TCP port of the throwaway PostgreSQL on 127.0.0.1 (0: a free one)")
	fs.IntVar(&redisPort, "redis-port", 0, "TCP port of the throwaway Redis on 127.0.0.1 (0: a free one)")
	cfg.register(fs, false)
	if err := parseFlags(fs, args, stdout, stderr, devSummary); err != nil {
		return err
	}
	// Before anything starts: a malformed address would otherwise be
	// found only once etcd, PostgreSQL and Redis are up.
	if etcdURL != "" {
		if err := addrflag.HTTPURL("--etcd-listen", etcdURL, "http://127.0.0.1:2379"); err != nil {
			return usage(err)
		}
		if err := checkEtcdListen(etcdURL, cfg.Insecure); err != nil {
			return usage(err)
		}
	}
	if err := cfg.checkAddrs(); err != nil {
		return usage(err)
	}
	if err := validatePort("--postgres-port", pgPort); err != nil {
		return usage(err)
	}
	if err := validatePort("--redis-port", redisPort); err != nil {
		return usage(err)
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return usage(err)
	}

	dir, err := os.MkdirTemp("", "fencegate-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	log.Info("starting embedded etcd", "url", etcdURL)
	etcd, err := embedded.Start(ctx, embedded.Config{Dir: filepath.Join(dir, "etcd"), ClientURL: etcdURL})
	if errors.Is(err, embedded.ErrPortInUse) {
		return fmt.Errorf("%w (another fencegate dev, or an etcd? move it with --etcd-listen)", err)
	}
	if err != nil {
		return err
	}
	defer etcd.Close()

	log.Info("starting throwaway PostgreSQL")
	pg, err := pgthrowaway.Start(ctx, pgthrowaway.Options{Port: pgPort})
	if err != nil {
		return err
	}
	defer pg.Close()

	cfg.EtcdEndpoints = strings.Join(etcd.Endpoints(), ",")
	// As in a deployment: fencegate serves as a role that is not a
	// superuser and may only run the fence check on its own schema, and
	// the PostgreSQL listener's clients log in as another, with no
	// fencegate role; the printed DSN is the superuser's, for creating
	// tables.
	cfg.PostgresDSN, err = pg.RuntimeRole(ctx, devGatewayRole)
	if err != nil {
		return err
	}
	if _, err := pg.ListenerRole(ctx, devRole); err != nil {
		return err
	}

	if _, err := redisthrowaway.FindBinary(); err != nil {
		log.Warn("Redis disabled: redis-server not found (install Debian package redis-server)")
		cfg.RedisListenAddr = ""
	} else {
		log.Info("starting throwaway Redis")
		rd, err := redisthrowaway.Start(ctx, redisthrowaway.Options{Port: redisPort})
		if err != nil {
			return err
		}
		defer rd.Close()
		cfg.RedisAddr = rd.Addr()
	}
	return serve(ctx, cfg, log, func() { printDevBanner(stdout, cfg, pg.DSN()) })
}

// checkEtcdListen refuses an embedded etcd other hosts can reach: it
// serves plain HTTP without authentication, and whoever writes its
// elections mints fencing tokens. --cert-file and --policy-file, which
// let the gateway's listeners out, do nothing for it.
func checkEtcdListen(etcdURL string, insecure bool) error {
	u, err := url.Parse(etcdURL)
	if err != nil || insecure || isLoopbackAddr(u.Host) {
		return nil // malformed: HTTPURL's to refuse
	}
	return fmt.Errorf("--etcd-listen %s is reachable from other hosts, and the embedded etcd has no TLS or authentication: anyone reaching it could make itself leader of any election; listen on loopback, or pass --insecure", etcdURL)
}

// devGatewayRole is the role fencegate dev serves PostgreSQL writes as,
// and devRole the one the PostgreSQL listener's clients log in as.
const (
	devGatewayRole = "fencegate_dev_gw"
	devRole        = "fencegate_dev"
)
