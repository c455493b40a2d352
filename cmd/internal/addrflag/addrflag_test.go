package addrflag

import "testing"

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		check func(string) error
		value string
		want  string // "" for none
	}{
		{func(v string) error { return HostPort("--grpc-addr", v, "127.0.0.1:7070") }, "127.0.0.1:7070", ""},
		{func(v string) error { return HostPort("--grpc-addr", v, "127.0.0.1:7070") }, ":0", ""},
		{func(v string) error { return HostPort("--grpc-addr", v, "127.0.0.1:7070") }, "[::1]:7070", ""},
		{func(v string) error { return HostPort("--grpc-addr", v, "127.0.0.1:7070") }, ":::", `--grpc-addr ":::": too many colons; want host:port such as 127.0.0.1:7070`},
		{func(v string) error { return HostPort("--grpc-addr", v, "127.0.0.1:7070") }, "localhost", `--grpc-addr "localhost": missing port; want host:port such as 127.0.0.1:7070`},
		{func(v string) error { return HostPort("--grpc-addr", v, "127.0.0.1:7070") }, "127.0.0.1:99999", `--grpc-addr "127.0.0.1:99999": bad port "99999"; want host:port such as 127.0.0.1:7070`},
		{func(v string) error { return HostPort("--grpc-addr", v, "127.0.0.1:7070") }, "http://[::1", `--grpc-addr "http://[::1": a URL; want host:port such as 127.0.0.1:7070`},
		{func(v string) error { return HostPortOrSocket("--redis-addr", v, "127.0.0.1:6379") }, "/run/redis.sock", ""},
		{func(v string) error { return HostPortOrSocket("--redis-addr", v, "127.0.0.1:6379") }, "redis", `--redis-addr "redis": missing port; want host:port such as 127.0.0.1:6379, or a Unix socket's absolute path`},
		{func(v string) error { return EtcdEndpoints("--etcd-endpoints", v) }, "127.0.0.1:2379, https://etcd-1.example:2379,unix://x", ""},
		{func(v string) error { return EtcdEndpoints("--etcd-endpoints", v) }, "127.0.0.1:2379,:::", `--etcd-endpoints: endpoint ":::": too many colons; want host:port or a URL such as https://127.0.0.1:2379`},
		{func(v string) error { return EtcdEndpoints("--etcd-endpoints", v) }, "http://[::1", `--etcd-endpoints: endpoint "http://[::1": missing ']' in host; want host:port or a URL such as https://127.0.0.1:2379`},
		{func(v string) error { return EtcdEndpoints("--etcd-endpoints", v) }, "ftp://x:1", `--etcd-endpoints: endpoint "ftp://x:1": scheme "ftp" is none of http, https, unix and unixs; want host:port or a URL such as https://127.0.0.1:2379`},
		{func(v string) error { return HTTPURL("--etcd-listen", v, "http://127.0.0.1:2379") }, "http://127.0.0.1:2379", ""},
		{func(v string) error { return HTTPURL("--etcd-listen", v, "http://127.0.0.1:2379") }, "http://[::1", `--etcd-listen "http://[::1": missing ']' in host; want a URL such as http://127.0.0.1:2379`},
		{func(v string) error { return HTTPURL("--etcd-listen", v, "http://127.0.0.1:2379") }, ":::", `--etcd-listen ":::": no http:// scheme; want a URL such as http://127.0.0.1:2379`},
		{func(v string) error { return HTTPURL("--etcd-listen", v, "http://127.0.0.1:2379") }, "127.0.0.1:2379", `--etcd-listen "127.0.0.1:2379": no http:// scheme; want a URL such as http://127.0.0.1:2379`},
		{func(v string) error { return HTTPURL("--etcd-listen", v, "http://127.0.0.1:2379") }, "https://127.0.0.1:2379", `--etcd-listen "https://127.0.0.1:2379": scheme "https", not http; want a URL such as http://127.0.0.1:2379`},
		{func(v string) error { return HTTPURL("--etcd-listen", v, "http://127.0.0.1:2379") }, "http://127.0.0.1", `--etcd-listen "http://127.0.0.1": missing port; want a URL such as http://127.0.0.1:2379`},
	} {
		err := tc.check(tc.value)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.value, got, tc.want)
		}
	}
}
