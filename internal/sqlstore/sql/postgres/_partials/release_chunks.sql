-- release_chunks frees the chunks of a claim's token ($2): the next
-- generation, no token, and in until the time it was freed, from which
-- sweep_advance drops records unused for an hour.
UPDATE {{claims}} SET {{> release_set $2}} WHERE token = $2 OR prev = $2
