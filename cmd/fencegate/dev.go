package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencegate/fencegate/election/embedded"
	pgthrowaway "github.com/fencegate/fencegate/proxy/postgres/throwaway"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

const devSummary = `Serve on embedded defaults, for trying fencegate out: an embedded etcd with
its client URL on 127.0.0.1:2379, a throwaway PostgreSQL made with this
machine's server binaries and a throwaway Redis (when redis-server is
installed), each on a free port, and the gateway on its default ports. Everything is removed on Ctrl-C or SIGTERM.`

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := defaultServeConfig()
	etcdURL := "http://127.0.0.1:2379"
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.StringVar(&etcdURL, "etcd-listen", etcdURL, "client URL of the embedded etcd")
	cfg.register(fs, false)
	if err := parseFlags(fs, args, stdout, stderr, devSummary); err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "fencegate-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	log.Info("starting embedded etcd", "url", etcdURL)
	etcd, err := embedded.Start(ctx, embedded.Config{Dir: filepath.Join(dir, "etcd"), ClientURL: etcdURL})
	if err != nil {
		return err
	}
	defer etcd.Close()

	log.Info("starting throwaway PostgreSQL")
	pg, err := pgthrowaway.Start(ctx, pgthrowaway.Options{})
	if err != nil {
		return err
	}
	defer pg.Close()

	cfg.EtcdEndpoints = strings.Join(etcd.Endpoints(), ",")
	// As in a deployment: fencegate serves as a role that is not a
	// superuser and may only run the fence check on its own schema; the
	// printed DSN is the superuser's, for creating tables.
	cfg.PostgresDSN, err = pg.RuntimeRole(ctx, devRole)
	if err != nil {
		return err
	}

	if _, err := redisthrowaway.FindBinary(); err != nil {
		log.Warn("Redis disabled: redis-server not found (install Debian package redis-server)")
	} else {
		log.Info("starting throwaway Redis")
		rd, err := redisthrowaway.Start(ctx, redisthrowaway.Options{})
		if err != nil {
			return err
		}
		defer rd.Close()
		cfg.RedisAddr = rd.Addr()
	}
	return serve(ctx, cfg, log, func() { printTryIt(stdout, cfg, pg.DSN()) })
}

// devRole is the role fencegate dev serves PostgreSQL writes as.
const devRole = "fencegate_dev"

func printTryIt(w io.Writer, cfg serveConfig, adminDSN string) {
	ep := cfg.EtcdEndpoints
	fmt.Fprintf(w, `
fencegate dev is up.
  etcd        %[1]s  (embedded)
  PostgreSQL  %[2]s  (throwaway; fencegate writes as role %[9]s)
  Redis       %[8]s
  gRPC        %[3]s   HTTP %[4]s

Try it (another terminal):
  psql '%[2]s' -c 'CREATE TABLE jobs(id int primary key, state text)'
  ETCDCTL_API=3 etcdctl --endpoints=%[1]s elect %[5]s/jobs worker-1 &   # leader
  ETCDCTL_API=3 etcdctl --endpoints=%[1]s get --prefix %[5]s/jobs/ -w json  # its create_revision is the token
  curl -s localhost%[6]s/v1/fences/jobs
  curl -s -XPOST localhost%[6]s/v1/fences/jobs/sql -H 'Fencing-Token: <token>' \
    -d '{"statements":[{"sql":"INSERT INTO jobs VALUES ($1, $2)","params":[1,"done"]}]}'
  curl -s localhost%[6]s/metrics | grep ^fencegate_

Ctrl-C stops everything.
`, ep, adminDSN, cfg.GRPCAddr, cfg.HTTPAddr, cfg.ElectionPrefix, portOf(cfg.HTTPAddr), redisTry(cfg), redisLine(cfg), devRole)
}

func redisLine(cfg serveConfig) string {
	if cfg.RedisAddr == "" {
		return "not started: install Debian package redis-server"
	}
	return cfg.RedisAddr + "  (throwaway)"
}

func redisTry(cfg serveConfig) string {
	if cfg.RedisAddr == "" {
		return ""
	}
	return fmt.Sprintf(`  curl -s -XPOST localhost%s/v1/fences/jobs/redis -H 'Fencing-Token: <token>' \
    -d '{"commands":[["SET","{jobs}:last","7"],["INCR","{jobs}:count"]]}'
  redis-cli -p %s GET '{jobs}:last'
`, portOf(cfg.HTTPAddr), strings.TrimPrefix(portOf(cfg.RedisAddr), ":"))
}

func portOf(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		return addr[i:]
	}
	return addr
}
