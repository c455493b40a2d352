package main

import "github.com/fencegate/fencegate/cmd/internal/buildinfo"

// Version and Commit are stamped at build time as fencegate's are (`make
// build`; see package buildinfo).
var (
	Version = ""
	Commit  = ""
)

// version returns the version fencectl reports (fencectl status too).
func version() string { return buildinfo.Version(Version) }

// versionLine is what `fencectl version` prints.
func versionLine() string {
	return buildinfo.Line("fencectl", version(), buildinfo.Commit(Commit))
}
