#!/usr/bin/env bash
# Regenerates the generated API code into OUT (default api/gen), from
# api/proto/fencegate/v1/gateway.proto and api/gateway.yaml, with Debian's
# protoc and the generators pinned in go.mod with the tool directive.
# Generated files already in OUT are removed first, so files of a renamed or
# deleted proto do not linger and the result is reproducible.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-api/gen}
mkdir -p "$out"

find "$out" -type f \( -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json' \) -delete
find "$out" -mindepth 1 -type d -empty -delete

plugin() { echo "--plugin=protoc-gen-$1=$(go tool -n "protoc-gen-$1")"; }

protoc -I api/proto -I /usr/include \
	"$(plugin go)" --go_out="$out" --go_opt=paths=source_relative \
	"$(plugin go-grpc)" --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	"$(plugin grpc-gateway)" --grpc-gateway_out="$out" \
	--grpc-gateway_opt=paths=source_relative,grpc_api_configuration=api/gateway.yaml \
	"$(plugin openapiv2)" --openapiv2_out="$out" \
	--openapiv2_opt=grpc_api_configuration=api/gateway.yaml,openapi_configuration=api/openapi.yaml \
	api/proto/fencegate/v1/gateway.proto
