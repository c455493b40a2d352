//go:build unix

package main

import (
	"io/fs"
	"syscall"
)

// fileOwner returns the uid owning the file fi describes.
func fileOwner(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
