package postgres

// Statement is one parameterised SQL statement of a fenced write.
type Statement struct {
	SQL string
	// Params are Go values as decoded from JSON: string, float64 or int64,
	// bool, nil, map[string]any and []any (the last two for json/jsonb).
	Params []any
}

// Result is what one statement of a fenced write returned.
type Result struct {
	RowsAffected int64
	// Columns and Rows are set when the statement returned rows (SELECT,
	// RETURNING). Row values are JSON-friendly Go values; a number a
	// float64 would round (int8 beyond 2^53, numeric, such a number in a
	// json or jsonb value) is its decimal text, a string.
	Columns []string
	Rows    [][]any
}
