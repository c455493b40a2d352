#!/usr/bin/env bash
# The shell example: two jobs take turns leading election shell-example
# under `fencectl run`, each writing a row through fencegate: worker-1 over
# the HTTP API with curl, worker-2 with psql through the PostgreSQL
# listener. worker-1's late retry, sent with its old token, is refused.
# See examples/README.md.
#
# Needs fencegate (`fencegate dev` will do), the table of
# examples/setup.sql, fencectl on PATH (or FENCECTL=path), fencectl's
# FENCECTL_ENDPOINT / FENCECTL_ETCD_ENDPOINTS when not on their defaults,
# and FG_PG_PORT when the listener is not on 7432.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fencectl=${FENCECTL:-fencectl}
election=${ELECTION:-shell-example}
endpoint=${FENCECTL_ENDPOINT:-http://127.0.0.1:7080}
spool=$(mktemp)
trap 'rm -f "$spool"' EXIT

# late_write TOKEN WORKER: what a stale request does: the same write,
# with the token it was issued under.
late_write() {
	curl -sS -XPOST "$endpoint/v1/fences/$election/sql" -H "Fencing-Token: $1" -w '  HTTP %{http_code}\n' \
		-d '{"statements":[{"sql":"INSERT INTO example_writes(example, worker, token) VALUES ($1, $2, $3)",
		     "params":["shell", "'"$2"'", '"$1"']}]}'
}

echo "== worker-1 leads election $election and writes"
SPOOL=$spool "$fencectl" run --election "$election" --value worker-1 -- "$here/worker.sh" worker-1
t1=$(cat "$spool")

echo "== worker-1 exited, so fencectl resigned: its term $t1 is over"
late_write "$t1" "worker-1 (zombie)"

echo "== worker-2 leads and writes with psql"
"$fencectl" run --election "$election" --value worker-2 -- "$here/psql-worker.sh" worker-2

echo "== worker-1's late retry, token $t1, after worker-2 wrote"
late_write "$t1" "worker-1 (zombie)"
