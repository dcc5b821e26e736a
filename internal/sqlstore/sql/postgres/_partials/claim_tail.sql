-- claim_tail ends every claim statement, after its CTE due (the rows it
-- read, each with its chunk's generation gen, at most $2): want, one row
-- per chunk of due; held, the chunks recorded under the claim's token
-- (hold_chunks); then the rows returned (claimed_rows).
want AS MATERIALIZED (
  SELECT DISTINCT d.id >> 8 AS chunk, d.gen FROM due AS d
), held AS (
  {{> hold_chunks}}
)
{{> claimed_rows}}
