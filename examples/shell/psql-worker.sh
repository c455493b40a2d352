#!/bin/sh
# The same job as worker.sh, with psql through fencegate's PostgreSQL
# listener: `fencectl run` put the fence and the token in PGOPTIONS, which
# libpq sends with the connection, so the SQL is plain.
#
#   fencectl run --election shell-example -- ./psql-worker.sh worker-2
set -eu
psql -X -v ON_ERROR_STOP=1 -h "${FG_PG_HOST:-127.0.0.1}" -p "${FG_PG_PORT:-7432}" -U "${FG_PG_USER:-fencegate_dev}" postgres \
	-c "INSERT INTO example_writes(example, worker, token) VALUES ('shell', '$1', $FENCEGATE_TOKEN)"
