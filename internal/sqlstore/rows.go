package sqlstore

import (
	"context"
)

// queryRow runs q and scans its first row into dest; found is false when
// there is none.
func queryRow(ctx context.Context, q Querier, sql string, args []any, dest ...any) (found bool, err error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return false, err
		}
		found = true
	}
	return found, rows.Err()
}

// eachRow runs query on q and calls fn for each row.
func eachRow(ctx context.Context, q Querier, query string, fn func(Rows) error) error {
	rows, err := q.Query(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func scanStrings(rows Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// rowStrings reads a row of unknown shape as text.
func rowStrings(rows Rows) ([]string, error) {
	type columner interface{ Columns() ([]string, error) }
	n := 1
	if c, ok := rows.(columner); ok {
		cols, err := c.Columns()
		if err != nil {
			return nil, err
		}
		n = len(cols)
	}
	vals := make([]textValue, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i, v := range vals {
		out[i] = v.s
	}
	return out, nil
}

func drain(rows Rows) error {
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}
