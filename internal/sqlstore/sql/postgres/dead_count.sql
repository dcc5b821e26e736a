-- dead_count walks the DEAD index (see dead_rows).
SELECT count(*) FROM {{outbox}} WHERE {{> dead_rows}}
