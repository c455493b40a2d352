package main

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRedTeam22PasswordsInAddressFlagsEchoed
//
// Attack: credentials that arrive inside an address, the way many
// deployments hand them out (REDIS_URL=redis://:pw@host:6379, an etcd
// endpoint http://user:pw@host:2379), put into fencegate's environment
// (FENCEGATE_REDIS_ADDR, FENCEGATE_REDIS_LEASE_ADDR,
// FENCEGATE_ETCD_ENDPOINTS) precisely so that ps does not show them.
//
// What happened:
//   - --redis-addr / --redis-lease-addr: fencegate recognises the value
//     as "a URL" and refuses it, but quotes the whole value, password
//     included, in its usage error on stderr.
//   - --etcd-endpoints: a userinfo part is accepted without a word
//     (clientv3 ignores it, so the credentials are not even used), and
//     the endpoint, password included, is written into the INFO start
//     line "fencegate serving ... etcd=http://root:<pw>@..." on every
//     start, and into every "etcd at ... is unreachable" error.
//
// What should happen: a value refused or logged is redacted (userinfo
// password replaced, as pgx does for DSNs), and an etcd endpoint with
// userinfo is refused with a pointer to --etcd-user /
// FENCEGATE_ETCD_PASSWORD rather than silently ignored and logged.
//
// Severity: medium-low (secret disclosure into logs on a plausible
// misconfiguration; the etcd case also silently drops the credentials).
func TestRedTeam22PasswordsInAddressFlagsEchoed(t *testing.T) {
	bin := rt2Binary(t)
	t.Run("redis addresses refused with the password quoted", func(t *testing.T) {
		for env, secret := range map[string]string{
			"FENCEGATE_REDIS_ADDR":       "Rt22RedisUrlPw",
			"FENCEGATE_REDIS_LEASE_ADDR": "Rt22LeaseUrlPw",
		} {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			cmd := exec.CommandContext(ctx, bin, "serve", "--etcd-endpoints=", "--term-sources=*=redis-lease")
			cmd.Env = append(os.Environ(), env+"=redis://default:"+secret+"@10.0.0.5:6379/0")
			if env == "FENCEGATE_REDIS_LEASE_ADDR" {
				cmd.Env = append(cmd.Env, "FENCEGATE_REDIS_ADDR=127.0.0.1:1")
			}
			out, _ := cmd.CombinedOutput()
			cancel()
			if strings.Contains(string(out), secret) {
				t.Errorf("%s=redis://default:<password>@...: fencegate printed the password:\n%s", env, out)
			}
		}
	})

	t.Run("etcd endpoint with userinfo logged at start", func(t *testing.T) {
		e := newRT2Env(t)
		const secret = "Rt22EtcdUrlPw"
		u, err := url.Parse(e.etcd.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword("root", secret)
		p, refused := e.tryServe(t, "--etcd-endpoints="+u.String())
		if p == nil {
			// The defence: refused, pointing at --etcd-user, the
			// password not shown.
			if strings.Contains(refused, secret) || !strings.Contains(refused, "--etcd-user") {
				t.Errorf("--etcd-endpoints with a password in it: refused, but %s", refused)
			}
			return
		}
		if log := p.log(); strings.Contains(log, secret) {
			t.Errorf("--etcd-endpoints with a password in it was accepted (and the credentials ignored), and the password is in the log:\n%s", tail(log, 3))
		}
	})
}
