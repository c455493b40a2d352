// Package buildinfo is the version and commit the commands report.
//
// Each command stamps its own main.Version and main.Commit at build time
// (`make build` does it):
//
//	go build -ldflags "-X main.Version=$(git describe --tags --always --dirty) -X main.Commit=$(git rev-parse HEAD)"
//
// and passes them here. Without them, the module version and VCS revision
// that the go command records (go install module@version, or a build in a
// git checkout with -buildvcs) are used, and "devel" when there are none.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version returns stamped, or the module version, or "devel".
func Version(stamped string) string {
	if stamped != "" {
		return stamped
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// Commit returns stamped, or the VCS revision the binary was built from
// with "-dirty" when the tree had changes, or "" when unknown.
func Commit(stamped string) string {
	if stamped != "" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// Line is what `<command> version` prints: "fencegate v1.2.3 (commit
// 0123abc, go1.26.0)".
func Line(command, version, commit string) string {
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s)", command, version, commit, runtime.Version())
}
