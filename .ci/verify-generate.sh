#!/usr/bin/env bash
# Regenerates the API code into a temporary copy of api/gen and fails on any
# difference with the committed api/gen. The work tree is left untouched.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cp -a api/gen "$tmp/gen"
.ci/generate.sh "$tmp/gen"

if ! diff -ru api/gen "$tmp/gen"; then
	echo "verify-generate: api/gen differs from what 'make generate' produces; run 'make generate' and commit the result" >&2
	exit 1
fi
echo "verify-generate: api/gen is up to date"
