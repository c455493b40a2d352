#!/bin/sh
# A job that writes one row through fencegate while it leads. It is run by
# `fencectl run`, which puts its fence, its fencing token and fencegate's
# address in the environment; the job itself knows nothing of etcd. A
# refused write (a later leader wrote: 409 STALE_TOKEN) fails the job
# (--fail-with-body), and fencectl exits with its status.
#
#   fencectl run --election shell-example -- ./worker.sh worker-1
set -eu
worker=$1
curl -sS --fail-with-body -XPOST "$FENCEGATE_HTTP_ADDR/v1/fences/$FENCEGATE_FENCE/sql" \
	-H "Fencing-Token: $FENCEGATE_TOKEN" -w '  HTTP %{http_code}\n' \
	-d '{"statements":[{"sql":"INSERT INTO example_writes(example, worker, token) VALUES ($1, $2, $3)",
	     "params":["shell", "'"$worker"'", '"$FENCEGATE_TOKEN"']}]}'
# A real job would go on to its next write; this one leaves its token
# behind, as a request stuck in a retry queue would keep it.
if [ -n "${SPOOL:-}" ]; then echo "$FENCEGATE_TOKEN" >"$SPOOL"; fi
