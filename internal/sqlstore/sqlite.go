package sqlstore

// sqliteDialect is the outbox on SQLite 3.38+ (SQL: sql/sqlite;
// modernc.org/sqlite ships its own, newer). Times are UTC text in SQLite's
// own format ('YYYY-MM-DD HH:MM:SS.SSS'), which sorts as time. Every
// statement on the pending rows says "status = 0" as a literal so that the
// planner can use the partial index.
var sqliteDialect = dialect{
	name:      "sqlite",
	quote:     quoteDouble,
	claims:    claimRange,
	noSchemas: true,
}
