package dbopen

import (
	"fmt"
	"net/url"
	"strings"
)

// WithPoolSize makes a PostgreSQL pool large enough for every relay and
// producer, unless the DSN sets its own size.
func WithPoolSize(dsn string, n int) string {
	if !strings.HasPrefix(dsn, "postgres") || strings.Contains(dsn, "pool_max_conns") {
		return dsn
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "pool_max_conns=" + url.QueryEscape(fmt.Sprint(n))
}
