package sqlstore

// tableSpec is what CheckSchema requires of one table at the latest schema
// version: its columns with their types as the dialect's catalog names them,
// its indexes and its triggers. A name that starts with "_" is a suffix of
// the table's own name ("_pkey" on table "outbox" is "outbox_pkey"). A
// migration that adds a column, an index or a trigger adds it here too:
// TestCheckSchemaKnowsEveryObject (cmd/outbox) fails on freshly migrated
// tables with anything the spec does not name.
type tableSpec struct {
	// table is "outbox", "inbox", or the suffix of a table the outbox table
	// brings with it ("_claims").
	table    string
	columns  []columnSpec
	indexes  []string
	triggers []string
}

type columnSpec struct {
	name  string
	types []string
	// collations, when set, are the collations the column may have.
	collations []string
}

func col(name string, types ...string) columnSpec { return columnSpec{name: name, types: types} }

const (
	pgTime    = "timestamp with time zone"
	myTime    = "datetime(6)"
	myJSON    = "json"     // MySQL 8
	mariaJSON = "longtext" // MariaDB's JSON, with a json_valid CHECK
)

// noPadBin are the NO PAD binary collations of schema version 3 (MariaDB's,
// MySQL 8's), which compare msg_id byte for byte.
var noPadBin = []string{"utf8mb4_nopad_bin", "utf8mb4_0900_bin"}

// schemaSpecs by dialect.
var schemaSpecs = map[string][]tableSpec{
	"postgres": {
		{table: "outbox", columns: []columnSpec{
			col("id", "bigint"), col("msg_id", "character varying(64)"), col("topic", "character varying(128)"),
			col("msg_key", "character varying(128)"), col("payload", "jsonb"), col("headers", "jsonb"),
			col("status", "smallint"), col("retries", "integer"), col("next_retry_at", pgTime), col("created_at", pgTime),
			col("sent_at", pgTime), col("last_error", "text"), col("dead_at", pgTime),
		}, indexes: []string{"_pkey", "_msg_id_key", "_requeued_idx", "_dead_idx", "_key_idx", "_requeued_key_idx"}, triggers: []string{"_dead_at", "_requeue"}},
		{table: "inbox", columns: []columnSpec{
			col("consumer_group", "character varying(64)"), col("msg_id", "character varying(64)"), col("consumed_at", pgTime),
		}, indexes: []string{"_pkey"}},
		{table: "_migrations", columns: []columnSpec{col("version", "integer"), col("name", "text"), col("applied_at", pgTime)},
			indexes: []string{"_pkey"}},
		{table: "_claims", columns: []columnSpec{
			col("chunk", "bigint"), col("token", "text"), col("until", pgTime), col("gen", "bigint"), col("prev", "text"),
		}, indexes: []string{"_pkey"}},
		{table: "_horizon", columns: []columnSpec{
			col("one", "boolean"), col("lwm", "bigint"), col("cand", "bigint"), col("cand_vxids", "text[]"),
			col("gen", "bigint"), col("seq_node", "oid"),
		}, indexes: []string{"_pkey"}},
	},
	"mysql": {
		{table: "outbox", columns: []columnSpec{
			col("id", "bigint"), {name: "msg_id", types: []string{"varchar(64)"}, collations: noPadBin}, col("topic", "varchar(128)"),
			col("msg_key", "varchar(128)"), col("payload", myJSON, mariaJSON), col("headers", myJSON, mariaJSON),
			col("status", "tinyint"), col("retries", "int"), col("next_retry_at", myTime), col("created_at", myTime),
			col("sent_at", myTime), col("last_error", "text"), col("dead_at", myTime),
		}, indexes: []string{"PRIMARY", "_msg_id_key", "_pending_idx", "_key_idx"}},
		{table: "inbox", columns: []columnSpec{
			{name: "consumer_group", types: []string{"varchar(64)"}, collations: noPadBin},
			{name: "msg_id", types: []string{"varchar(64)"}, collations: noPadBin}, col("consumed_at", myTime),
		}, indexes: []string{"PRIMARY"}},
		{table: "_migrations", columns: []columnSpec{col("version", "int"), col("name", "varchar(255)"), col("applied_at", myTime)},
			indexes: []string{"PRIMARY"}},
		{table: "_claims", columns: []columnSpec{
			col("id", "bigint"), col("token", "char(24)"), col("until", myTime),
		}, indexes: []string{"PRIMARY", "_token_idx"}},
	},
	"sqlite": {
		{table: "outbox", columns: []columnSpec{
			col("id", "integer"), col("msg_id", "text"), col("topic", "text"), col("msg_key", "text"),
			col("payload", "text"), col("headers", "text"), col("status", "integer"), col("retries", "integer"),
			col("next_retry_at", "text"), col("created_at", "text"), col("sent_at", "text"), col("last_error", "text"),
			col("dead_at", "text"),
		}, indexes: []string{"_pending_idx", "_dead_idx", "_key_idx"}},
		{table: "inbox", columns: []columnSpec{col("consumer_group", "text"), col("msg_id", "text"), col("consumed_at", "text")}},
		{table: "_migrations", columns: []columnSpec{col("version", "integer"), col("name", "text"), col("applied_at", "text")}},
		{table: "_claims", columns: []columnSpec{col("token", "text"), col("lo", "integer"), col("hi", "integer"), col("until", "text")}},
	},
}
