// Package serverproc runs a disposable server as a child process: its log
// lines, readiness, and stop.
//
// It holds the mechanics the throwaway PostgreSQL and Redis servers share. A
// LogWriter splits the child's output into lines, hands them to a log
// function, keeps the last few for error messages and reports the line that
// says the server is ready. A Process is one run of the child in its own
// process group, which Kill and Stop take down as a whole. A Runner keeps at
// most one Process at a time on a fixed or free port of 127.0.0.1 and stops,
// kills, restarts and finally closes it, removing its temporary directory.
//
// What it does not do: it knows nothing about the server itself. The caller
// builds the command, names the ready line and the stop signal, and checks
// anything beyond the ready line (Redis answering PING, for instance). It
// does not restart a server that exits on its own, and it relies on Linux
// process groups (Setpgid) to kill a server's children with it.
package serverproc
