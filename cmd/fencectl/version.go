package main

import (
	"fmt"
	"io"

	"github.com/fencegate/fencegate/cmd/internal/buildinfo"
)

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

// runVersion prints versionLine. It takes the global flags, as every
// command does, but no argument, and does not check the globals: a bad
// FENCECTL_ENDPOINT must not hide the version.
func runVersion(g *globalConfig, args []string, stdout, stderr io.Writer) error {
	c := newCommand(g, "version", "", "Print fencectl's version, commit and Go version, and exit.")
	c.checkGlobals = false
	rest, err := c.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return c.usageError(stderr, "unexpected argument %q", rest[0])
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}
