//go:build !linux

package main

// onReadOnlyFS reports false where mount flags are not looked up here:
// checkFileMode then judges directories by their modes alone.
func onReadOnlyFS(string) bool { return false }
