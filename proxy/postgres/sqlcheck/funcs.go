package sqlcheck

import (
	"strconv"
	"strings"
)

const (
	whySession  = "changes session state beyond the write, which outlives it on the pooled connection"
	whyAdvisory = "a session-level advisory lock outlives the write's transaction (use the _xact_ form)"
	whyOutside  = "reaches outside the write's transaction"
	whyFiles    = "reads or writes the server's files"
	whyLargeObj = "large objects live outside the write's tables, and lo_import/lo_export touch server files"
	whyServer   = "controls the server, not data"
	whyDynamic  = "runs SQL from a string, which this check cannot see"
	whyNamed    = "reads tables named in a string, which this check cannot see"
	whyNotify   = "sends a notification: NOTIFY is not a data statement"
)

// refusedFuncs are the functions refused anywhere in a statement, matched
// on the function's own name whatever schema qualifies it: exactly, or as
// a prefix ("dblink*") or suffix ("*_exec"). Sleeps are not here: they are
// refused by length (see Config.MaxSleep).
var refusedFuncs = []struct{ name, why string }{
	{"set_config", whySession},
	{"setseed", whySession},
	{"pg_advisory_lock", whyAdvisory},
	{"pg_advisory_lock_shared", whyAdvisory},
	{"pg_try_advisory_lock", whyAdvisory},
	{"pg_try_advisory_lock_shared", whyAdvisory},
	{"pg_advisory_unlock", whyAdvisory},
	{"pg_advisory_unlock_shared", whyAdvisory},
	{"pg_advisory_unlock_all", whyAdvisory},
	{"pg_notify", whyNotify},

	{"dblink*", "opens another connection, whose writes are outside the write's transaction"},
	{"pg_background_*", "runs SQL in a background worker, outside the write's transaction"},
	{"*_exec", whyDynamic},
	{"pg_logical_*", "consumes or writes logical decoding data outside the write's transaction"},
	{"pg_replication_*", whyOutside},
	{"pg_copy_*", "copies replication slots, which live outside the write's transaction"},
	{"pg_drop_replication_slot", "drops a replication slot, which lives outside the write's transaction"},
	{"pg_stat_reset*", "resets statistics outside the write's transaction"},

	{"pg_read_file", whyFiles},
	{"pg_read_binary_file", whyFiles},
	{"pg_stat_file", whyFiles},
	{"pg_ls_*", whyFiles},
	{"pg_file_*", whyFiles},
	{"pg_logdir_ls", whyFiles},
	{"lo_*", whyLargeObj},
	{"loread", whyLargeObj},
	{"lowrite", whyLargeObj},

	{"pg_terminate_backend", whyServer},
	{"pg_cancel_backend", whyServer},
	{"pg_reload_conf", whyServer},
	{"pg_rotate_logfile*", whyServer},
	{"pg_promote", whyServer},
	{"pg_switch_wal", whyServer},
	{"pg_create_*", whyServer},
	{"pg_backup_*", whyServer},
	{"pg_start_backup", whyServer},
	{"pg_stop_backup", whyServer},
	{"pg_wal_replay_*", whyServer},
	{"pg_log_backend_memory_contexts", whyServer},

	{"query_to_xml", whyDynamic},
	{"query_to_xmlschema", whyDynamic},
	{"query_to_xml_and_xmlschema", whyDynamic},
	{"cursor_to_xml", whyDynamic},
	{"cursor_to_xmlschema", whyDynamic},
	{"ts_stat", whyDynamic},
	{"ts_rewrite", whyDynamic},
	{"crosstab*", whyDynamic},
	{"connectby", whyDynamic},
	{"table_to_xml*", whyNamed},
	{"schema_to_xml*", whyNamed},
	{"database_to_xml*", whyNamed},
}

var (
	refusedExact    = map[string]string{}
	refusedPrefixes []struct{ prefix, why string }
	refusedSuffixes []struct{ suffix, why string }
)

func init() {
	for _, f := range refusedFuncs {
		switch {
		case strings.HasSuffix(f.name, "*"):
			refusedPrefixes = append(refusedPrefixes, struct{ prefix, why string }{strings.TrimSuffix(f.name, "*"), f.why})
		case strings.HasPrefix(f.name, "*"):
			refusedSuffixes = append(refusedSuffixes, struct{ suffix, why string }{strings.TrimPrefix(f.name, "*"), f.why})
		default:
			refusedExact[f.name] = f.why
		}
	}
}

// refusedFunc returns why a function of this name is refused, or "".
func refusedFunc(name string) string {
	if why, ok := refusedExact[name]; ok {
		return why
	}
	for _, p := range refusedPrefixes {
		if strings.HasPrefix(name, p.prefix) {
			return p.why
		}
	}
	for _, s := range refusedSuffixes {
		if strings.HasSuffix(name, s.suffix) {
			return s.why
		}
	}
	return ""
}

// isSleep reports whether name is one of the pg_sleep family.
func isSleep(name string) bool {
	return name == "pg_sleep" || name == "pg_sleep_for" || name == "pg_sleep_until"
}

// intervalUnits are the units intervalSeconds understands, in seconds.
// Months and years are not: their length depends on the date.
var intervalUnits = map[string]float64{
	"us": 1e-6, "usec": 1e-6, "usecs": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
	"ms": 1e-3, "msec": 1e-3, "msecs": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
	"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
	"m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
	"h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
	"d": 86400, "day": 86400, "days": 86400,
}

// intervalSeconds reads the plainest interval literals ("1.5 seconds",
// "2 min 30 s", "0.1"): a number and a unit, repeated, or one bare number
// (seconds). Anything else is not understood, so the sleep is refused
// rather than guessed at.
func intervalSeconds(s string) (float64, bool) {
	f := strings.Fields(strings.ToLower(s))
	if len(f) == 1 {
		return plainNumber(f[0])
	}
	if len(f) == 0 || len(f)%2 != 0 {
		return 0, false
	}
	total := 0.0
	for i := 0; i < len(f); i += 2 {
		n, ok := plainNumber(f[i])
		unit, known := intervalUnits[f[i+1]]
		if !ok || !known {
			return 0, false
		}
		total += n * unit
	}
	return total, true
}

// plainNumber parses an unsigned decimal number with an optional fraction:
// nothing that PostgreSQL and strconv could read differently.
func plainNumber(s string) (float64, bool) {
	if s == "" || s == "." {
		return 0, false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && c != '.' {
			return 0, false
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	return n, err == nil
}
