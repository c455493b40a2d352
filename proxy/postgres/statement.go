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
	// RETURNING). Row values are JSON-friendly Go values.
	Columns []string
	Rows    [][]any
}
