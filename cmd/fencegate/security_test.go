package main

import (
	"strings"
	"testing"
)

func TestCheckExposure(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		sec      securityConfig
		insecure bool
		want     string // "" for no error, else a substring
	}{
		{addr: "127.0.0.1:7070"},
		{addr: "[::1]:7070"},
		{addr: "localhost:7070"},
		{addr: "0.0.0.0:7070", want: "--grpc-addr 0.0.0.0:7070 is reachable from other hosts without --cert-file and --policy-file"},
		{addr: ":7070", want: "without --cert-file and --policy-file"},
		{addr: "[::]:7070", want: "reachable from other hosts"},
		{addr: "10.0.0.5:7070", sec: securityConfig{CertFile: "c"}, want: "without --policy-file"},
		{addr: "10.0.0.5:7070", sec: securityConfig{PolicyFile: "p"}, want: "without --cert-file"},
		{addr: "gateway.internal:7070", want: "reachable"},
		{addr: "10.0.0.5:7070", sec: securityConfig{CertFile: "c", PolicyFile: "p"}},
		{addr: "0.0.0.0:7070", insecure: true},
	} {
		err := tc.sec.checkExposure(tc.insecure, [2]string{"--grpc-addr", tc.addr})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %+v: got %v, want no error", tc.addr, tc.sec, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %+v: got %v, want an error containing %q", tc.addr, tc.sec, err, tc.want)
		}
	}
}
