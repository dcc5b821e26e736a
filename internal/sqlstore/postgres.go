package sqlstore

// postgresDialect is the outbox on PostgreSQL 13+ (SQL: sql/postgres). A claim
// returns each row's next_retry_at (when it came due).
var postgresDialect = dialect{
	name:            "postgres",
	quote:           quoteDouble,
	claims:          claimChunks,
	claimReturnsDue: true,
}
