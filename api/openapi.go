package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI v2 document of the HTTP/JSON API, generated with
// protoc-gen-openapiv2 from the same proto and HTTP rules as the gateway
// (make generate), and served at GET /v1/openapi.json.
//
//go:embed gen/fencegate/v1/gateway.swagger.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}
