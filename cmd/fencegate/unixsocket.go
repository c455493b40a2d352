package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

// listenUnix listens on the Unix socket path, as PostgreSQL and Redis do on
// theirs: a socket file left by a process that died is replaced, one a
// process still listens on is an error, as is any other file. The socket
// is open to every local user (mode 0777, PostgreSQL's
// unix_socket_permissions and pgbouncer's unix_socket_mode): who may
// write is decided by authentication, and the directory's permissions
// narrow who may reach it. Closing the listener removes the file.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process listens on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o777); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}
