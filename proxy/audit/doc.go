// Package audit writes fencegate's audit log: one JSON object per line, one
// line per authorization decision on a write.
//
// Guarantees: Write never does disk I/O on the caller's goroutine, and never
// drops a record to keep up: when the queue is full it waits, and says so in
// fencegate_audit_blocked_total. A record that cannot be written (a full
// disk) is counted in fencegate_audit_write_errors_total and logged. Every
// string is escaped as encoding/json escapes it, so no value a client sends
// (a fence name, a principal) can end a line or forge a record. Reopen
// re-opens the path for logrotate; Close writes everything queued.
//
// Not guaranteed: that a record reached the disk. Records are handed to
// the kernel whenever the queue empties, not synced.
package audit
