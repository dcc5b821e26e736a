-- chunk_lease reads the record in {{claims}} of the chunk of the row whose
-- id is the argument (an expression), with the record's generation (0 when
-- there is none) and whether a live lease holds the row. A chunk held by
-- the claim's predecessor ($5) does not hold the rows past the
-- predecessor's last ($6): this claim may take the chunk over for them
-- (see hold_chunks).
SELECT coalesce(max(l.gen), 0) AS gen, coalesce(bool_or(l.token IS NOT NULL AND l.until > now()
    AND (l.token <> $5::text OR {{arg}} <= $6::bigint)), false) AS live
FROM {{claims}} AS l WHERE l.chunk = {{arg}} >> 8
