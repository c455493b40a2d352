package main

import (
	"fmt"
	"io"
	"net"
)

// printDevBanner tells where `fencegate dev`'s parts listen, and prints the
// shell variables README.md's walkthrough uses: its blocks are written
// against them, so they run unchanged on any ports. adminDSN is the
// throwaway PostgreSQL's superuser, for the walkthrough's psql.
func printDevBanner(w io.Writer, cfg serveConfig, adminDSN string) {
	redis := "not started: install Debian package redis-server"
	if cfg.RedisAddr != "" {
		redis = cfg.RedisAddr + "  (throwaway)"
	}
	env := fmt.Sprintf("  export ETCDCTL_ENDPOINTS=%s FG_HTTP=%s FG_GRPC=%s\n  export DSN='%s'",
		cfg.EtcdEndpoints, dialable(cfg.HTTPAddr), dialable(cfg.GRPCAddr), adminDSN)
	if cfg.RedisAddr != "" {
		_, port, _ := net.SplitHostPort(cfg.RedisAddr)
		env += " REDIS_PORT=" + port
	}
	if cfg.RedisListenAddr != "" {
		_, port, _ := net.SplitHostPort(dialable(cfg.RedisListenAddr))
		env += " FG_RESP_PORT=" + port
	}
	fmt.Fprintf(w, `
fencegate dev is up.
  etcd        %s  (embedded)
  PostgreSQL  %s  (throwaway; fencegate writes as role `+devGatewayRole+`, psql as `+devRole+`)
  Redis       %s
  gRPC        %s   HTTP %s
%s
Try it from another terminal: paste these lines, then follow README.md's
walkthrough ("Two minutes: a zombie leader refused").
%s

Ctrl-C stops everything.
`, cfg.EtcdEndpoints, adminDSN, redis, cfg.GRPCAddr, cfg.HTTPAddr, pgLine(cfg)+redisLine(cfg), env)
}

// dialable turns a listen address into one a client on this machine can
// dial: an empty or wildcard host becomes 127.0.0.1.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// validatePort checks a --*-port flag: 0 (a free port) or a TCP port.
func validatePort(flag string, port int) error {
	if port < 0 || port > 65535 {
		return fmt.Errorf("%s=%d: want a TCP port (1-65535), or 0 for a free one", flag, port)
	}
	return nil
}

// pgLine is the banner's lines about the PostgreSQL listener, if any:
// over TCP, and over its Unix socket.
func pgLine(cfg serveConfig) string {
	const psql = "  psql        PGOPTIONS='-c fencegate.fence=<fence> -c fencegate.token=<token>' psql -h %s -p %s -U %s postgres\n"
	line, port := "", defaultPgSocketPort
	if cfg.PgListenAddr != "" {
		var host string
		host, port, _ = net.SplitHostPort(dialable(cfg.PgListenAddr))
		line = fmt.Sprintf(psql, host, port, devRole)
	}
	if cfg.PgUnixSocketDir != "" {
		line += fmt.Sprintf(psql, cfg.PgUnixSocketDir, port, devRole)
	}
	return line
}

// redisLine is the banner's lines about the RESP listener, if any.
func redisLine(cfg serveConfig) string {
	const cli = "  redis-cli   redis-cli %s --user <fence> --pass <token>\n"
	line := ""
	if cfg.RedisListenAddr != "" {
		host, port, _ := net.SplitHostPort(dialable(cfg.RedisListenAddr))
		line = fmt.Sprintf(cli, "-h "+host+" -p "+port)
	}
	if cfg.RedisUnixSocket != "" {
		line += fmt.Sprintf(cli, "-s "+cfg.RedisUnixSocket)
	}
	return line
}
