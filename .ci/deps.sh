#!/usr/bin/env bash
# Installs the system packages fencegate's build, tests and walkthrough need,
# and only those a machine lacks. Fast and silent-ish when all are present.
# As root it uses apt-get (Debian 12); otherwise it names what is missing and
# fails.
set -euo pipefail

missing=()

have() { command -v "$1" >/dev/null 2>&1; }

# protoc and the well-known types it imports, for `make generate`.
have protoc || missing+=(protobuf-compiler)
[[ -f /usr/include/google/protobuf/struct.proto ]] || missing+=(libprotobuf-dev)
# Throwaway Redis servers for tests and `fencegate dev`.
have redis-server || missing+=(redis-server)
# redis-benchmark, the client of fencebench's redisbench part (Debian's redis-server
# pulls it in).
have redis-benchmark || missing+=(redis-tools)
# etcdctl for the walkthrough (etcd itself is embedded in the binary).
have etcdctl || missing+=(etcd-client)
# A real etcd 3.4 server, for the test of an idle election watch on it.
have etcd || missing+=(etcd-server)
# promtool, for the unit tests of deploy/prometheus's alert rules, and the
# Prometheus server that deploy's live test runs against fencegate.
have promtool && have prometheus || missing+=(prometheus)
# curl and jq for the README walkthrough and its test.
have curl || missing+=(curl)
have jq || missing+=(jq)
# pgbouncer, the peer fencebench compares the PostgreSQL listener with.
have_pgbouncer() { have pgbouncer || [[ -x /usr/sbin/pgbouncer ]]; }
have_pgbouncer || missing+=(pgbouncer)
# nutcracker (twemproxy), the peer fencebench compares the RESP listener with.
have_nutcracker() { have nutcracker || [[ -x /usr/sbin/nutcracker ]]; }
have_nutcracker || missing+=(nutcracker)
# redis-py, one of the unmodified clients the RESP listener's tests drive.
# Debian's python3 (not another one first on PATH), where python3-redis installs.
have_redispy() { /usr/bin/python3 -c 'import redis' >/dev/null 2>&1; }
have_redispy || missing+=(python3-redis)
# redis-rb (Sidekiq's, Resque's and Rails' Redis client), for Debian's ruby.
have_redisrb() { have ruby && ruby -e 'require "redis"' >/dev/null 2>&1; }
have_redisrb || missing+=(ruby-redis)
# PHP's PDO for PostgreSQL and phpredis, drivers the listeners' tests drive.
have_php() { have php && php -r 'exit(extension_loaded("pdo_pgsql") && extension_loaded("redis") ? 0 : 1);' >/dev/null 2>&1; }
have_php || missing+=(php-cli php-pgsql php-redis)
# The PostgreSQL drivers the listener's tests drive (api/pgwire,
# TestDrivers): psycopg2, psycopg 3, asyncpg and the ORMs SQLAlchemy and
# Django for Debian's python3, ActiveRecord, and PgJDBC (run under the system's java, as
# ZooKeeper below).
/usr/bin/python3 -c 'import psycopg2' >/dev/null 2>&1 || missing+=(python3-psycopg2)
/usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1 || missing+=(python3-psycopg)
/usr/bin/python3 -c 'import asyncpg' >/dev/null 2>&1 || missing+=(python3-asyncpg)
/usr/bin/python3 -c 'import sqlalchemy' >/dev/null 2>&1 || missing+=(python3-sqlalchemy)
/usr/bin/python3 -c 'import django' >/dev/null 2>&1 || missing+=(python3-django)
# Rails' ActiveRecord and ruby-pg, for Debian's ruby.
have_activerecord() { have ruby && ruby -e 'require "active_record"; require "pg"' >/dev/null 2>&1; }
have_activerecord || missing+=(ruby-activerecord ruby-pg)
[[ -f /usr/share/java/postgresql.jar ]] || missing+=(libpostgresql-jdbc-java)
# Perl's DBI with DBD::Pg, for Debian's perl.
have_dbdpg() { have perl && perl -MDBD::Pg -e 1 >/dev/null 2>&1; }
have_dbdpg || missing+=(libdbd-pg-perl)
# HikariCP, the JDBC pool of Spring Boot, and SLF4J's no-op logger for it.
have_hikari() { [[ -f /usr/share/java/HikariCP.jar && -f /usr/share/java/slf4j-nop.jar ]]; }
have_hikari || missing+=(libhikaricp-java libslf4j-java)

# ZooKeeper (its server jar, run under the system's java by
# election/zookeeper/throwaway) and kazoo, the Python client whose Election
# campaigns in the zookeeper term source's tests. Debian's zookeeper package
# installs no service: the server runs only when a test starts it.
have_zookeeper() { [[ -f /usr/share/java/zookeeper.jar ]] && have java; }
have_zookeeper || missing+=(zookeeper)
have_kazoo() { /usr/bin/python3 -c 'import kazoo' >/dev/null 2>&1; }
have_kazoo || missing+=(python3-kazoo)

# The worker examples (examples/): Python with Debian's python3-etcd3 and
# python3-requests (for the system's python3), Node (fetch) and npm for the
# etcd3 package.
have_py() { /usr/bin/python3 -c "import $1" >/dev/null 2>&1; }
have_py etcd3 || missing+=(python3-etcd3)
have_py requests || missing+=(python3-requests)
have node || missing+=(nodejs)
have npm || missing+=(npm)

# PostgreSQL server binaries: Debian keeps them off PATH.
have_postgres() {
	have postgres && return 0
	local p
	for p in /usr/lib/postgresql/*/bin/postgres; do
		[[ -x $p ]] && return 0
	done
	return 1
}
have_postgres || missing+=(postgresql)

if ((${#missing[@]} == 0)); then
	echo "deps: all present"
	exit 0
fi

if [[ $(id -u) -ne 0 ]] || ! have apt-get; then
	echo "deps: missing ${missing[*]}; install them (Debian: sudo apt-get install -y ${missing[*]})" >&2
	exit 1
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# etcd-server, prometheus, pgbouncer and nutcracker are wanted for their binaries only;
# on a machine running systemd their packages start services, and the system
# etcd would take 127.0.0.1:2379 from `make run`'s embedded one.
if [[ -d /run/systemd/system ]]; then
	for pkg in etcd-server:etcd prometheus:prometheus pgbouncer:pgbouncer nutcracker:nutcracker; do
		if [[ " ${missing[*]} " == *" ${pkg%%:*} "* ]]; then
			echo "deps: stopping and disabling the ${pkg#*:} service that ${pkg%%:*} installed"
			systemctl disable --now "${pkg#*:}" >/dev/null 2>&1 || true
		fi
	done
fi

# Check again: a package that installed but did not provide what we look for
# should fail here, not later in a test.
have protoc && [[ -f /usr/include/google/protobuf/struct.proto ]] &&
	have redis-server && have etcdctl && have etcd && have promtool && have prometheus && have curl && have jq && have_postgres && have_pgbouncer &&
	have_nutcracker && have_redispy && have_redisrb && have_php && have_hikari && have_dbdpg && have_activerecord && have_zookeeper && have_kazoo && have_py etcd3 && have_py requests && have node && have npm || {
	echo "deps: still missing something after installing ${missing[*]}" >&2
	exit 1
}
echo "deps: installed ${missing[*]}"
