package main

import "golang.org/x/sys/unix"

// onReadOnlyFS says whether path is on a file system mounted read-only,
// where no one writes whatever the modes say.
func onReadOnlyFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}
