-- mark_lock locks the rows of mark_others first, in the claim's order.
SELECT id FROM {{outbox}} WHERE id IN ({{ids}}) FOR UPDATE
