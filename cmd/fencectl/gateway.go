package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// gateway is fencegate's HTTP API as fencectl uses it.
type gateway struct {
	base  string // the endpoint, no trailing '/'
	token string
	hc    *http.Client
}

func newGateway(g *globalConfig) (*gateway, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if g.CACert != "" || g.Cert != "" || strings.HasPrefix(g.Endpoint, "https://") {
		cfg, err := clientTLS("--cacert", g.CACert, "--cert", g.Cert, g.Key)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	}
	return &gateway{
		base:  strings.TrimSuffix(g.Endpoint, "/"),
		token: g.Token,
		hc:    &http.Client{Transport: tr, Timeout: g.CommandTimeout},
	}, nil
}

func (c *gateway) close() { c.hc.CloseIdleConnections() }

// get fetches path and returns the status and body; a transport failure
// is an error naming the endpoint.
func (c *gateway) get(ctx context.Context, path string) (int, []byte, error) {
	return c.do(ctx, http.MethodGet, path, nil)
}

// do sends method to path with body (JSON, or nil) and returns the status
// and body.
func (c *gateway) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		return 0, nil, fmt.Errorf("fencegate at %s: %w", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("fencegate at %s: %s %s: %w", c.base, method, path, err)
	}
	return resp.StatusCode, out, nil
}

// getProto fetches path and decodes a 200 answer into m; any other answer
// is an error with fencegate's reason.
func (c *gateway) getProto(ctx context.Context, path string, m proto.Message) error {
	code, body, err := c.get(ctx, path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return refusal(code, http.MethodGet, path, body)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, m); err != nil {
		return fmt.Errorf("fencegate at %s: GET %s: bad answer: %w", c.base, path, err)
	}
	return nil
}

func (c *gateway) listFences(ctx context.Context) ([]fence, error) {
	var resp fencegatev1.ListFencesResponse
	if err := c.getProto(ctx, "/v1/fences", &resp); err != nil {
		return nil, err
	}
	out := make([]fence, 0, len(resp.GetFences()))
	for _, f := range resp.GetFences() {
		out = append(out, fenceOf(f))
	}
	return out, nil
}

func (c *gateway) getFence(ctx context.Context, name string) (fence, error) {
	var f fencegatev1.Fence
	if err := c.getProto(ctx, "/v1/fences/"+url.PathEscape(name), &f); err != nil {
		return fence{}, err
	}
	return fenceOf(&f), nil
}

// resetFence lowers fence name's high-water mark to mark (POST
// /v1/fences/NAME/reset).
func (c *gateway) resetFence(ctx context.Context, name string, mark uint64) (*fencegatev1.ResetFenceResponse, error) {
	path := "/v1/fences/" + url.PathEscape(name) + "/reset"
	req, err := protojson.Marshal(&fencegatev1.ResetFenceRequest{HighWater: &mark})
	if err != nil {
		return nil, err
	}
	code, body, err := c.do(ctx, http.MethodPost, path, req)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, refusal(code, http.MethodPost, path, body)
	}
	var resp fencegatev1.ResetFenceResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("fencegate at %s: POST %s: bad answer: %w", c.base, path, err)
	}
	return &resp, nil
}

// fence is what fencectl prints of a fence; 64-bit numbers are JSON
// strings, as in fencegate's API.
type fence struct {
	Name      string `json:"name"`
	HighWater uint64 `json:"highWater,string"`
	Term      uint64 `json:"term,string"`
	Leader    string `json:"leader"`
	HasLeader bool   `json:"hasLeader"`
}

func fenceOf(f *fencegatev1.Fence) fence {
	return fence{Name: f.GetName(), HighWater: f.GetHighWater(), Term: f.GetTerm(), Leader: f.GetLeader(), HasLeader: f.GetHasLeader()}
}

// refusal turns an error answer (google.rpc.Status as JSON, or plain text
// from /readyz and friends) into one line.
func refusal(code int, method, path string, body []byte) error {
	var st struct {
		Message string `json:"message"`
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		for _, d := range st.Details {
			// fencegate's refusals already lead with "fencegate: REASON: ".
			if d.Reason != "" && !strings.HasPrefix(st.Message, "fencegate: "+d.Reason+":") {
				return fmt.Errorf("%s %s: %s: %s (HTTP %d)", method, path, d.Reason, st.Message, code)
			}
		}
		return fmt.Errorf("%s %s: %s (HTTP %d)", method, path, st.Message, code)
	}
	// Not fencegate's answer (a metrics port, a load balancer's page):
	// one line, and what to check.
	text := strings.TrimSpace(string(body))
	if text == "" || len(text) > 120 || strings.ContainsAny(text, "<\n") {
		return fmt.Errorf("%s %s: HTTP %d, not an answer of fencegate's API: check --endpoint", method, path, code)
	}
	return fmt.Errorf("%s %s: HTTP %d: %s", method, path, code, text)
}

// unwrapURLError drops net/http's "Get \"url\":" wrapper: the endpoint is
// named already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
