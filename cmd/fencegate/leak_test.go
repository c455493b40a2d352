package main

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		// The race-built binary the drain and pause tests share.
		if rt2Bin != "" {
			_ = os.RemoveAll(filepath.Dir(rt2Bin))
		}
		os.Exit(code)
	}))
}
