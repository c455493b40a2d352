package addrflag

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// HostPort checks v, the value of flag name, as a TCP address in
// host:port form (the host may be empty: every interface, or this host
// when dialled). example is shown as the form wanted.
func HostPort(name, v, example string) error {
	if err := hostPort(v); err != nil {
		return fmt.Errorf("%s %q: %w; want host:port such as %s", name, Redact(v), err, example)
	}
	return nil
}

// HostPortOrSocket is HostPort, also taking the absolute path of a Unix
// socket (as go-redis reads an address with a leading '/').
func HostPortOrSocket(name, v, example string) error {
	if strings.HasPrefix(v, "/") {
		return nil
	}
	if err := hostPort(v); err != nil {
		return fmt.Errorf("%s %q: %w; want host:port such as %s, or a Unix socket's absolute path", name, Redact(v), err, example)
	}
	return nil
}

// EtcdEndpoints checks each comma-separated endpoint of v, the value of
// flag name, in a form etcd's client takes: host:port, or an http://,
// https://, unix:// or unixs:// URL.
func EtcdEndpoints(name, v string) error {
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if err := etcdEndpoint(e); errors.Is(err, ErrCredentials) {
			return fmt.Errorf("%s: endpoint %q: %w: give them as --etcd-user and --etcd-password", name, Redact(e), err)
		} else if err != nil {
			return fmt.Errorf("%s: endpoint %q: %w; want host:port or a URL such as https://127.0.0.1:2379", name, Redact(e), err)
		}
	}
	return nil
}

// HTTPURL checks v, the value of flag name, as an http:// URL with a
// host:port and nothing after it, such as an etcd listen URL.
func HTTPURL(name, v, example string) error {
	if err := httpURL(v); err != nil {
		return fmt.Errorf("%s %q: %w; want a URL such as %s", name, Redact(v), err, example)
	}
	return nil
}

func hostPort(v string) error {
	if strings.Contains(v, "://") {
		return errors.New("a URL")
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return reason(err)
	}
	if strings.ContainsAny(host, "/?#@ ") {
		return fmt.Errorf("bad host %q", host)
	}
	return checkPort(port)
}

// checkPort accepts a port number or a service name (net.Listen and
// net.Dial take "http").
func checkPort(port string) error {
	if port == "" {
		return errors.New("no port")
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// ErrCredentials is an etcd endpoint with a user name or password in it,
// which etcd's client does not use (it takes them apart, as
// clientv3.Config's Username and Password), and which would be shown
// wherever the endpoint is.
var ErrCredentials = errors.New("a user name or password in it, which etcd's client does not use")

func etcdEndpoint(e string) error {
	if !strings.Contains(e, "://") {
		if strings.Contains(e, "@") {
			return ErrCredentials
		}
		return hostPort(e)
	}
	u, err := url.Parse(e)
	if err != nil {
		return reason(err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.User != nil {
			return ErrCredentials
		}
		if u.Host == "" {
			return errors.New("no host")
		}
		if _, port, err := net.SplitHostPort(u.Host); err == nil {
			return checkPort(port)
		}
		return nil
	case "unix", "unixs":
		if u.Host == "" && u.Path == "" {
			return errors.New("no socket path")
		}
		return nil
	}
	return fmt.Errorf("scheme %q is none of http, https, unix and unixs", u.Scheme)
}

func httpURL(v string) error {
	if !strings.Contains(v, "://") {
		return errors.New("no http:// scheme")
	}
	u, err := url.Parse(v)
	if err != nil {
		return reason(err)
	}
	if u.Scheme != "http" {
		return fmt.Errorf("scheme %q, not http", u.Scheme)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return errors.New("more than scheme and host:port")
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil {
		return reason(err)
	} else if err := checkPort(port); err != nil {
		return err
	}
	return nil
}

// Redact is v with what may be a password masked: whatever stands between
// a scheme's "://" (or the start) and the last '@' (a user name followed by
// ':' stays), as url.URL.Redacted does for a URL that parses, and as it
// cannot for one that does not. A value without '@' is returned as is.
func Redact(v string) string {
	at := strings.LastIndex(v, "@")
	if at < 0 {
		return v
	}
	start := 0
	if i := strings.Index(v, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	userinfo := "xxxxx"
	if user, _, ok := strings.Cut(v[start:at], ":"); ok {
		userinfo = user + ":xxxxx"
	}
	return v[:start] + userinfo + v[at:]
}

// reason is the cause err gives, without the value it repeats: net's
// "address x: missing port in address", url's `parse "x": missing ']'
// in host`.
func reason(err error) error {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return errors.New(strings.TrimSuffix(ae.Err, " in address"))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
