// Package goworkers builds the Go client programs the listeners' tests
// drive: the commands of api/testdata/go, a module of its own, so that the
// clients they use (lib/pq, GORM, redigo, rueidis) stay out of fencegate's
// go.mod.
package goworkers

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build builds every command of api/testdata/go into dir, where each is
// then dir/<command>, e.g. dir/pqworker. The go command fetches the
// module's dependencies from the module proxy when they are not cached.
func Build(dir string) error {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return fmt.Errorf("goworkers: cannot find api/testdata/go")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command, to build api/testdata/go's workers: %w", err)
	}
	cmd := exec.Command(gobin, "build", "-o", dir+string(filepath.Separator), "./...")
	cmd.Dir = filepath.Join(filepath.Dir(self), "..", "..", "testdata", "go")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in api/testdata/go: %w: %s", err, out)
	}
	return nil
}
