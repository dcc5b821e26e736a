-- release_set is how a claim gives up its chunks, its token the argument (a
-- parameter). A chunk the claim took over from its predecessor (prev, see
-- hold_chunks) goes back to the predecessor, which still holds rows there; a
-- chunk the claim's successor took over from it only forgets it; any other
-- chunk of the claim is freed.
token = CASE WHEN token = {{arg}} THEN prev ELSE token END,
    until = CASE WHEN token = {{arg}} AND prev IS NULL THEN clock_timestamp() ELSE until END,
    prev = NULL, gen = gen + 1
