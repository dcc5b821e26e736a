SELECT topic, count(*) FROM {{outbox}} WHERE {{> dead_rows}} GROUP BY topic
