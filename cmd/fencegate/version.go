package main

import "github.com/fencegate/fencegate/cmd/internal/buildinfo"

// Version and Commit are stamped at build time (`make build` does it; see
// package buildinfo).
var (
	Version = ""
	Commit  = ""
)

// version returns the version fencegate reports in its logs.
func version() string { return buildinfo.Version(Version) }

// versionLine is what `fencegate version` prints.
func versionLine() string {
	return buildinfo.Line("fencegate", version(), buildinfo.Commit(Commit))
}
