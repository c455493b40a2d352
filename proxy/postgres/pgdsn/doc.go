// Package pgdsn turns the error of parsing a PostgreSQL connection string
// (pgx's ParseConfig) into one that never shows the string.
//
// pgx's *pgconn.ParseConfigError quotes the whole connection string with
// the passwords it recognises masked, and its masking is best effort: a
// password spelled "password = x", quoted with an escaped quote, or
// holding an unescaped '@' in a URL comes out whole or in part. A string
// that failed to parse is exactly the one whose shape is in doubt, so
// ParseError drops it and keeps the reason only.
//
// It does not redact connection strings that parsed, nor errors of
// connecting; those name the host, which pgconn takes from the parsed
// config.
package pgdsn
