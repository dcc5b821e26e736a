package sqlstore

// mysqlDialect is the outbox on MariaDB 10.6+ and MySQL 8 (SQL: sql/mysql).
// Times are UTC (UTC_TIMESTAMP), whatever the session's time zone.
var mysqlDialect = dialect{
	name:          "mysql",
	quote:         quoteBacktick,
	claims:        claimRowLease,
	idList:        true,
	readCommitted: true,
}
