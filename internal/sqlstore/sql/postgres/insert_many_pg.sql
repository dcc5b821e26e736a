INSERT INTO {{outbox}} (msg_id, topic, msg_key, payload, headers)
SELECT m, t, NULLIF(k, ''), p::jsonb, NULLIF(h, '')::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(m, t, k, p, h, n)
ORDER BY n
ON CONFLICT (msg_id) DO NOTHING
RETURNING msg_id
