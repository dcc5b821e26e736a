CREATE TABLE IF NOT EXISTS {{outbox}} (
  id            INTEGER PRIMARY KEY,
  msg_id        TEXT    NOT NULL UNIQUE CHECK (length(msg_id) BETWEEN 1 AND 64),
  topic         TEXT    NOT NULL CHECK (length(topic) BETWEEN 1 AND 128),
  msg_key       TEXT    CHECK (msg_key IS NULL OR length(msg_key) <= 128),
  payload       TEXT    NOT NULL CHECK (json_valid(payload)),
  headers       TEXT    CHECK (headers IS NULL OR json_valid(headers)),
  status        INTEGER NOT NULL DEFAULT 0 CHECK (status IN (0, 1, 2)),
  retries       INTEGER NOT NULL DEFAULT 0,
  next_retry_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  sent_at       TEXT,
  last_error    TEXT
);
-- The relay claims WHERE status = 0 ... ORDER BY id LIMIT n. SQLite uses a
-- partial index only when the query repeats its condition as a literal, which
-- every statement in sqlite.go does.
CREATE INDEX IF NOT EXISTS {{outbox_pending_idx}} ON {{outbox}} (id) WHERE status = 0;
CREATE TABLE IF NOT EXISTS {{inbox}} (
  consumer_group TEXT NOT NULL CHECK (length(consumer_group) BETWEEN 1 AND 64),
  msg_id         TEXT NOT NULL CHECK (length(msg_id) BETWEEN 1 AND 64),
  consumed_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
  PRIMARY KEY (consumer_group, msg_id)
) WITHOUT ROWID;
-- Relays coordinate through this table instead of writing a lease into every
-- claimed row: a claim records the range of ids it holds until it finishes or
-- its lease runs out. That keeps the claim itself a read and halves the writes.
CREATE TABLE IF NOT EXISTS {{claims}} (
  token TEXT    PRIMARY KEY,
  lo    INTEGER NOT NULL,
  hi    INTEGER NOT NULL,
  until TEXT    NOT NULL
) WITHOUT ROWID;
