-- hold_chunks records the chunks of the rows in due (want, one row per
-- chunk) under the claim's token ($3) until now() + $4 ms, each only if its
-- record is still the generation due read and free, expired, or held by the
-- claim's predecessor ($5, empty for none), and returns the chunks it
-- recorded. A chunk taken from the predecessor keeps its token in prev: the
-- predecessor's rows there stay under a live lease, and its mark still
-- counts for them (mark_others). The claim reads only the rows past the
-- predecessor's last ($6, see chunk_lease), so the two claims' rows never
-- meet.
INSERT INTO {{claims}} AS l (chunk, token, until, gen)
  SELECT w.chunk, $3::text, now() + $4 * interval '1 millisecond', w.gen + 1 FROM want AS w
  ON CONFLICT (chunk) DO UPDATE SET token = excluded.token, until = excluded.until, gen = excluded.gen,
    prev = CASE WHEN l.token = $5::text AND l.until > now() THEN l.token END
  WHERE l.gen = excluded.gen - 1 AND (l.token IS NULL OR l.until <= now() OR l.token = $5::text)
  RETURNING l.chunk
