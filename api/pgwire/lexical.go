package pgwire

// lexicalSettings are the session's settings that change how the server
// reads a backslash in SQL text, as the server last reported them
// (ParameterStatus: both are reported at the start and on every change).
// fencegate reads SQL as with the defaults: see session.lexicalRefusal.
type lexicalSettings struct {
	scsOff   bool   // standard_conforming_strings is off
	encoding string // client_encoding, when it is one of clientOnlyEncodings
}

// clientOnlyEncodings are PostgreSQL's client-only encodings, in which
// the second byte of a character may be an ASCII byte, a backslash among
// them (the reason the server cannot use them).
var clientOnlyEncodings = map[string]bool{
	"SJIS": true, "SHIFT_JIS_2004": true, "BIG5": true, "GBK": true,
	"UHC": true, "GB18030": true, "JOHAB": true,
}

// report takes a ParameterStatus body.
func (l *lexicalSettings) report(body []byte) {
	name, rest, _ := cstring(body)
	val, _, _ := cstring(rest)
	switch string(name) {
	case "standard_conforming_strings":
		l.scsOff = string(val) != "on"
	case "client_encoding":
		l.encoding = ""
		if clientOnlyEncodings[string(val)] {
			l.encoding = string(val)
		}
	}
}

// why says why a backslash in a Query may be read otherwise by the
// server than by fencegate, or "".
func (l *lexicalSettings) why() string {
	switch {
	case l.scsOff:
		return "standard_conforming_strings is off in this session, so the database may read a backslash in this query otherwise than fencegate, which fences it: SET standard_conforming_strings = on, or pass values as parameters"
	case l.encoding != "":
		return "client_encoding " + l.encoding + " can end a character with a backslash byte, so the database may read this query otherwise than fencegate, which fences it: use UTF8, or pass values as parameters"
	}
	return ""
}
