package addrflag

import (
	"errors"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"redis://default:pw@10.0.0.5:6379/0", "redis://default:xxxxx@10.0.0.5:6379/0"},
		{"redis://:pw@10.0.0.5:6379", "redis://:xxxxx@10.0.0.5:6379"},
		{"redis://token@10.0.0.5:6379", "redis://xxxxx@10.0.0.5:6379"},
		{"redis://u:p@ss:w@rd@h:1", "redis://u:xxxxx@h:1"},
		{"u:pw@h:1", "u:xxxxx@h:1"},
		{"http://u:pw@[::1", "http://u:xxxxx@[::1"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPasswordsNotQuoted(t *testing.T) {
	for _, tc := range []struct {
		check func() error
		creds bool // refused as ErrCredentials
	}{
		{func() error {
			return HostPortOrSocket("--redis-addr", "redis://default:Secret@10.0.0.5:6379/0", "127.0.0.1:6379")
		}, false},
		{func() error { return HostPort("--grpc-addr", "u:Secret@h:1", "127.0.0.1:7070") }, false},
		{func() error {
			return HTTPURL("--etcd-listen", "http://u:Secret@127.0.0.1:2379", "http://127.0.0.1:2379")
		}, false},
		{func() error {
			return EtcdEndpoints("--etcd-endpoints", "127.0.0.1:2379,http://root:Secret@127.0.0.1:2379")
		}, true},
		{func() error { return EtcdEndpoints("--etcd-endpoints", "https://root:Secret@etcd:2379") }, true},
		{func() error { return EtcdEndpoints("--etcd-endpoints", "root:Secret@etcd:2379") }, true},
		{func() error { return EtcdEndpoints("--etcd-endpoints", "http://root:Secret@[::1") }, false},
	} {
		err := tc.check()
		if err == nil {
			t.Errorf("got no error, want a refusal")
			continue
		}
		if strings.Contains(err.Error(), "Secret") {
			t.Errorf("got %q, which shows the password", err)
		}
		if got := errors.Is(err, ErrCredentials); got != tc.creds {
			t.Errorf("%q: ErrCredentials %v, want %v", err, got, tc.creds)
		}
		if tc.creds && !strings.Contains(err.Error(), "--etcd-user and --etcd-password") {
			t.Errorf("got %q, want it to point at --etcd-user and --etcd-password", err)
		}
	}
}
