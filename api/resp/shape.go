package resp

import (
	"strings"

	"github.com/fencegate/fencegate/proxy/redis"
)

// shape is how a data command's reply, as Redis would send it, differs
// from what the fencing script hands back. The script runs commands in
// RESP2 and returns Lua values, which lose some types: a status reply
// comes back as a plain string, a null array as nil, and the RESP3 types
// Redis uses for some commands (maps, sets, doubles, score pairs) as the
// flat RESP2 arrays and strings. The command and its arguments say which
// type Redis would have used; TestReplyShapesAsRedis holds each shape to
// Redis's own bytes.
type shape uint8

const (
	shapePlain      shape = iota
	shapeStatus           // a string is a status reply (+OK)
	shapeNullArray        // nil is a null array in RESP2 (LPOP key count)
	shapeMap              // RESP3: a map of the flat field, value array (HGETALL)
	shapeSet              // RESP3: a set (SMEMBERS)
	shapeDouble           // RESP3: a double (ZSCORE)
	shapeDoubles          // RESP3: an array of doubles and nulls (ZMSCORE)
	shapeScorePair        // RESP3: member, double (ZPOPMIN key)
	shapeScorePairs       // RESP3: [member, double] pairs of the flat array (WITHSCORES)
	shapePairs            // RESP3: [field, value] pairs of the flat array (HRANDFIELD ... WITHVALUES)
)

// shapeOf returns the shape of the reply to args, a data command.
func shapeOf(args []string) shape {
	if len(args) == 0 {
		return shapePlain
	}
	var buf [16]byte
	switch upper(args[0], &buf) {
	case "SET":
		if hasWord(after(args, 3), "GET") {
			return shapePlain
		}
		return shapeStatus
	case "SETEX", "PSETEX", "MSET", "HMSET", "LSET", "LTRIM", "RENAME", "TYPE", "RESTORE", "PFMERGE":
		return shapeStatus
	case "LPOP", "RPOP":
		if len(args) > 2 {
			return shapeNullArray
		}
	case "HGETALL":
		return shapeMap
	case "SMEMBERS", "SINTER", "SUNION", "SDIFF":
		return shapeSet
	case "SPOP":
		if len(args) > 2 {
			return shapeSet
		}
	case "ZSCORE", "ZINCRBY":
		return shapeDouble
	case "ZADD":
		// ZADD ... INCR answers with the new score (or nil), otherwise with
		// a count; a member named INCR gets the count, an integer, which
		// reply writes as it is.
		if hasWord(after(args, 2), "INCR") {
			return shapeDouble
		}
	case "ZMSCORE":
		return shapeDoubles
	case "ZPOPMIN", "ZPOPMAX":
		if len(args) > 2 {
			return shapeScorePairs
		}
		return shapeScorePair
	case "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGE":
		if hasWord(after(args, 4), "WITHSCORES") {
			return shapeScorePairs
		}
	case "HRANDFIELD":
		if len(args) == 4 && redis.OptionIs(args[3], "WITHVALUES") {
			return shapePairs
		}
	}
	return shapePlain
}

// after returns the arguments from index i on. Replies come only for
// commands that passed the arity check, but a short command must not panic
// here.
func after(args []string, i int) []string {
	if i >= len(args) {
		return nil
	}
	return args[i:]
}

// hasWord reports whether args holds the option word, as Redis reads
// options (redis.OptionIs).
func hasWord(args []string, word string) bool {
	for _, a := range args {
		if redis.OptionIs(a, word) {
			return true
		}
	}
	return false
}

// reply writes a data command's reply in the shape Redis would give it.
// A value that does not have the shape's structure (which the script does
// not return) is written as it is.
func (s *session) reply(args []string, v any) {
	w := s.w
	sh := shapeOf(args)
	switch sh {
	case shapeStatus:
		// A status cannot hold a line end: a value that does is a bulk
		// string, whatever shape was expected of it.
		if str, ok := v.(string); ok && !strings.ContainsAny(str, "\r\n") {
			w.status(str)
			return
		}
	case shapeNullArray:
		if v == nil {
			w.nullArray()
			return
		}
	}
	if !w.resp3 {
		w.value(v)
		return
	}
	switch sh {
	case shapeMap:
		if a, ok := v.([]any); ok && len(a)%2 == 0 {
			w.mapHeader(len(a) / 2)
			for _, e := range a {
				w.value(e)
			}
			return
		}
	case shapeSet:
		if a, ok := v.([]any); ok {
			w.setHeader(len(a))
			for _, e := range a {
				w.value(e)
			}
			return
		}
	case shapeDouble:
		if str, ok := v.(string); ok {
			w.double(str)
			return
		}
	case shapeDoubles:
		if a, ok := v.([]any); ok {
			w.array(len(a))
			for _, e := range a {
				if str, ok := e.(string); ok {
					w.double(str)
				} else {
					w.value(e)
				}
			}
			return
		}
	case shapeScorePair:
		if a, ok := v.([]any); ok && len(a) == 2 {
			if score, ok := a[1].(string); ok {
				w.array(2)
				w.value(a[0])
				w.double(score)
				return
			}
		}
	case shapeScorePairs, shapePairs:
		if a, ok := v.([]any); ok && len(a)%2 == 0 && (sh == shapePairs || scoresAt(a)) {
			w.array(len(a) / 2)
			for i := 0; i < len(a); i += 2 {
				w.array(2)
				w.value(a[i])
				if sh == shapeScorePairs {
					w.double(a[i+1].(string))
				} else {
					w.value(a[i+1])
				}
			}
			return
		}
	}
	w.value(v)
}

// scoresAt reports whether a, a flat array of pairs, has a string (a
// score) in every second place.
func scoresAt(a []any) bool {
	for i := 1; i < len(a); i += 2 {
		if _, ok := a[i].(string); !ok {
			return false
		}
	}
	return true
}
