package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit are stamped at build time (`make build` does it):
//
//	go build -ldflags "-X main.Version=$(git describe --tags --always --dirty) -X main.Commit=$(git rev-parse HEAD)"
//
// Without them, the module version and VCS revision that the go command
// records (go install module@version, or a build in a git checkout with
// -buildvcs) are used, and "devel" when there are none.
var (
	Version = ""
	Commit  = ""
)

// version returns the version fencegate reports in its logs.
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// commit returns the VCS revision fencegate was built from, with
// "-dirty" when the tree had changes, or "" when unknown.
func commit() string {
	if Commit != "" {
		return Commit
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

// versionLine is what `fencegate version` prints.
func versionLine() string {
	c := commit()
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("fencegate %s (commit %s, %s)", version(), c, runtime.Version())
}
