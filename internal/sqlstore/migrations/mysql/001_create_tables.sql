CREATE TABLE IF NOT EXISTS {{outbox}} (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  msg_id        VARCHAR(64)  NOT NULL,
  topic         VARCHAR(128) NOT NULL,
  msg_key       VARCHAR(128) NULL,
  payload       JSON         NOT NULL,
  headers       JSON         NULL,
  status        TINYINT      NOT NULL DEFAULT 0,
  retries       INT          NOT NULL DEFAULT 0,
  next_retry_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  created_at    DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  sent_at       DATETIME(6)  NULL,
  last_error    TEXT         NULL,
  UNIQUE KEY {{outbox_msg_id_key}} (msg_id),
  -- The relay claims WHERE status = 0 ... ORDER BY id LIMIT n through this index.
  KEY {{outbox_pending_idx}} (status, id),
  CONSTRAINT {{outbox_status_check}} CHECK (status IN (0, 1, 2)),
  CONSTRAINT {{outbox_msg_id_check}} CHECK (msg_id <> '' AND topic <> '')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS {{inbox}} (
  consumer_group VARCHAR(64) NOT NULL,
  msg_id         VARCHAR(64) NOT NULL,
  consumed_at    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  PRIMARY KEY (consumer_group, msg_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
