package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/api"
)

// TestOpenAPI checks GET /v1/openapi.json serves the generated document,
// and that the document has every HTTP rule of api/gateway.yaml.
func TestOpenAPI(t *testing.T) {
	h, err := api.NewServer(nil, 1<<20).HTTPHandler(t.Context(), api.HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: got %s %q, want 200 application/json", resp.Status, resp.Header.Get("Content-Type"))
	}
	onDisk, err := os.ReadFile("gen/fencegate/v1/gateway.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, onDisk) || !bytes.Equal(api.OpenAPI, onDisk) {
		t.Errorf("GET /v1/openapi.json: got %d bytes, want api/gen/fencegate/v1/gateway.swagger.json's %d", len(body), len(onDisk))
	}

	var doc struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}
	if doc.Swagger != "2.0" {
		t.Errorf("swagger: got %q, want 2.0", doc.Swagger)
	}
	raw, err := os.ReadFile("gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		HTTP struct {
			Rules []map[string]string `json:"rules"`
		} `json:"http"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.HTTP.Rules) == 0 {
		t.Fatal("api/gateway.yaml: no HTTP rules")
	}
	for _, r := range cfg.HTTP.Rules {
		for _, method := range []string{"get", "post", "put", "patch", "delete"} {
			path, ok := r[method]
			if !ok {
				continue
			}
			op, ok := doc.Paths[path][method]
			if !ok {
				t.Errorf("%s: got no %s %s in the document, want one (paths: %s)", r["selector"], strings.ToUpper(method), path, keys(doc.Paths))
				continue
			}
			// Writes say they need the token (api/openapi.yaml); a
			// reset is an operator's, with no token.
			if method != "post" || r["selector"] == "fencegate.v1.Gateway.ResetFence" {
				continue
			}
			var o struct {
				Parameters []struct {
					Name     string `json:"name"`
					In       string `json:"in"`
					Required bool   `json:"required"`
				} `json:"parameters"`
			}
			if err := json.Unmarshal(op, &o); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range o.Parameters {
				found = found || p.Name == "Fencing-Token" && p.In == "header" && p.Required
			}
			if !found {
				t.Errorf("POST %s: got parameters %+v, want the required header Fencing-Token", path, o.Parameters)
			}
		}
	}
}

func keys[V any](m map[string]V) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(out, " ")
}
