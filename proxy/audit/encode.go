package audit

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRecord appends r as one line of JSON. Its output is byte for byte
// what json.Marshal(r) gives, plus the newline, without reflection or an
// allocation per record.
func appendRecord(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request_id":`...)
	b = appendString(b, r.RequestID)
	b = append(b, `,"principal":`...)
	b = appendString(b, r.Principal)
	if r.Peer != "" {
		b = append(b, `,"peer":`...)
		b = appendString(b, r.Peer)
	}
	b = append(b, `,"action":`...)
	b = appendString(b, r.Action)
	b = append(b, `,"fence":`...)
	b = appendString(b, r.Fence)
	b = append(b, `,"token":`...)
	b = strconv.AppendUint(b, r.Token, 10)
	b = append(b, `,"term":`...)
	b = strconv.AppendUint(b, r.Term, 10)
	b = append(b, `,"high_water_before":`...)
	b = strconv.AppendUint(b, r.HighWaterBefore, 10)
	b = append(b, `,"high_water_after":`...)
	b = strconv.AppendUint(b, r.HighWaterAfter, 10)
	b = append(b, `,"backend":`...)
	b = appendString(b, r.Backend)
	if r.Protocol != "" {
		b = append(b, `,"protocol":`...)
		b = appendString(b, r.Protocol)
	}
	if r.Role != "" {
		b = append(b, `,"role":`...)
		b = appendString(b, r.Role)
	}
	b = append(b, `,"outcome":`...)
	b = appendString(b, r.Outcome)
	b = append(b, `,"rows_affected":`...)
	b = strconv.AppendInt(b, r.Rows, 10)
	b = append(b, `,"statements_sha256":`...)
	b = appendString(b, r.Statements)
	if r.Shadow {
		b = append(b, `,"shadow_denied":true`...)
	}
	if r.RolledBack {
		b = append(b, `,"rolled_back":true`...)
	}
	return append(b, "}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendString quotes s as encoding/json does with its default HTML
// escaping: control characters (so newlines) escaped, invalid UTF-8 as
// U+FFFD, and U+2028/U+2029 escaped for JavaScript readers.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
