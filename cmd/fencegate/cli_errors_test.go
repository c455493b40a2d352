package main

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/election/freeport"
)

// TestMalformedAddressFlags: a malformed address in a flag is a usage
// error found before anything listens, dials or starts: one line naming
// the flag and the value, then the pointer to --help, and status 2; not
// net's or net/url's raw error, a dial timeout, or the exposure check's
// "reachable from other hosts" about an address that is no address.
func TestMalformedAddressFlags(t *testing.T) {
	// No etcd, and a backend that is never dialled when the check works.
	serve := []string{"serve", "--etcd-endpoints=", "--redis-addr=127.0.0.1:1", "--etcd-dial-timeout=1s"}
	// dev's etcd off its default port, should the check not stop it.
	dev := []string{"dev", "--etcd-listen=http://" + freeport.Addr(t)}
	tests := []struct {
		name string
		args []string
		want string // the first line of stderr; the second is the pointer to --help
	}{
		{
			"dev --etcd-listen, unclosed bracket",
			[]string{"dev", "--etcd-listen", "http://[::1"},
			`--etcd-listen "http://[::1": missing ']' in host; want a URL such as http://127.0.0.1:2379`,
		},
		{
			"dev --etcd-listen, colons",
			[]string{"dev", "--etcd-listen", ":::"},
			`--etcd-listen ":::": no http:// scheme; want a URL such as http://127.0.0.1:2379`,
		},
		{
			"dev --etcd-listen, no port",
			[]string{"dev", "--etcd-listen", "http://127.0.0.1"},
			`--etcd-listen "http://127.0.0.1": missing port; want a URL such as http://127.0.0.1:2379`,
		},
		{
			"dev --grpc-addr", append(dev, "--grpc-addr=:::"),
			`--grpc-addr ":::": too many colons; want host:port such as 127.0.0.1:7070`,
		},
		{
			"serve --grpc-addr", append(serve, "--grpc-addr=:::"),
			`--grpc-addr ":::": too many colons; want host:port such as 127.0.0.1:7070`,
		},
		{
			"serve --http-addr, a URL", append(serve, "--http-addr=http://[::1"),
			`--http-addr "http://[::1": a URL; want host:port such as 127.0.0.1:7080`,
		},
		{
			"serve --pg-listen-addr, no port", append(serve, "--pg-listen-addr=localhost"),
			`--pg-listen-addr "localhost": missing port; want host:port such as 127.0.0.1:7432`,
		},
		{
			"serve --redis-listen-addr, port out of range", append(serve, "--redis-listen-addr=127.0.0.1:99999"),
			`--redis-listen-addr "127.0.0.1:99999": bad port "99999"; want host:port such as 127.0.0.1:7379`,
		},
		{
			"serve --metrics-addr", append(serve, "--metrics-addr=:::"),
			`--metrics-addr ":::": too many colons; want host:port such as 127.0.0.1:9090`,
		},
		{
			"serve --pprof-addr", append(serve, "--pprof-addr=:::"),
			`--pprof-addr ":::": too many colons; want host:port such as 127.0.0.1:6060`,
		},
		{
			"serve --redis-addr", append(serve, "--redis-addr=:::"),
			`--redis-addr ":::": too many colons; want host:port such as 127.0.0.1:6379, or a Unix socket's absolute path`,
		},
		{
			"serve --redis-lease-addr", append(serve, "--redis-lease-addr=redis"),
			`--redis-lease-addr "redis": missing port; want host:port such as 127.0.0.1:6379, or a Unix socket's absolute path`,
		},
		{
			"serve --etcd-endpoints", append(serve, "--etcd-endpoints=127.0.0.1:2379,http://[::1"),
			`--etcd-endpoints: endpoint "http://[::1": missing ']' in host; want host:port or a URL such as https://127.0.0.1:2379`,
		},
		{
			"serve --zookeeper-servers", append(serve, "--zookeeper-servers=zk:::"),
			`--zookeeper-servers "zk:::": too many colons; want host:port such as 127.0.0.1:2181`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, code := fencegateCLI(t, tc.args...)
			cmd := tc.args[0]
			want := "fencegate " + cmd + ": " + tc.want + "\nRun 'fencegate " + cmd + " --help' for usage.\n"
			if code != 2 || got != want {
				t.Errorf("fencegate %s:\ngot status %d, stderr\n%s\nwant status 2, stderr\n%s", strings.Join(tc.args, " "), code, got, want)
			}
		})
	}
}
