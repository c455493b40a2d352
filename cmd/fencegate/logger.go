package main

import "log/slog"

// durationsAsText is the loggers' ReplaceAttr: a duration is written as Go
// prints it ("10s", "54ms"), not as JSON's integer nanoseconds.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
