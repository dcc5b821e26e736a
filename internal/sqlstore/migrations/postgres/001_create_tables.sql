CREATE TABLE IF NOT EXISTS {{outbox}} (
  id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  msg_id        VARCHAR(64)  NOT NULL,
  topic         VARCHAR(128) NOT NULL,
  msg_key       VARCHAR(128),
  payload       JSONB        NOT NULL,
  headers       JSONB,
  status        SMALLINT     NOT NULL DEFAULT 0,
  retries       INT          NOT NULL DEFAULT 0,
  next_retry_at TIMESTAMPTZ  NOT NULL DEFAULT now(),
  created_at    TIMESTAMPTZ  NOT NULL DEFAULT now(),
  sent_at       TIMESTAMPTZ,
  last_error    TEXT,
  CONSTRAINT {{outbox_msg_id_key}} UNIQUE (msg_id),
  CONSTRAINT {{outbox_status_check}} CHECK (status IN (0, 1, 2)),
  CONSTRAINT {{outbox_msg_id_check}} CHECK (msg_id <> '' AND topic <> '')
);
-- The relay claims with WHERE status = 0 ... ORDER BY id LIMIT n: this partial
-- index holds only the pending rows, so the claim never walks sent history.
CREATE INDEX IF NOT EXISTS {{outbox_pending_idx}} ON {{outbox}} (id) WHERE status = 0;
CREATE TABLE IF NOT EXISTS {{inbox}} (
  consumer_group VARCHAR(64) NOT NULL,
  msg_id         VARCHAR(64) NOT NULL,
  consumed_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer_group, msg_id)
);
