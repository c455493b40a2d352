package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit are stamped at build time as fencegate's are
// (`make build`); without them the go command's build info is used.
var (
	Version = ""
	Commit  = ""
)

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func commit() string {
	if Commit != "" {
		return Commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
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
	if rev == "" {
		return "unknown"
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// versionLine is what `fencectl version` prints.
func versionLine() string {
	return fmt.Sprintf("fencectl %s (commit %s, %s)", version(), commit(), runtime.Version())
}
